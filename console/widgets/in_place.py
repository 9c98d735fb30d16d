"""Update a ``Static`` without re-laying out the screen when its height stays the same.

Textual's ``Static.update`` lays out the whole screen by default (in the startup view with a log
flood beside it: ~25 ms of layout plus a full repaint, 110-160 ms of the loop's CPU, once a second
for the running compile and phase durations). ``Static.update(content, layout=False)`` only
repaints the widget, which is right whenever the new content is as tall as the old one at the
widget's width: :func:`update_in_place` measures that and lays out only when it changed.
"""

from __future__ import annotations

from textual.visual import VisualType
from textual.widgets import Static


def update_in_place(box: Static, content: VisualType) -> bool:
    """Show ``content`` in ``box``; lay out the screen only when its height changes.

    The new content's height is measured at the box's current content width (cells) with
    Textual's own measure (``get_content_height``: the Visual's wrapped height). A box not laid
    out yet (no width), or one whose width follows its content (``width: auto``), is always
    laid out.

    Returns:
        ``True`` when a layout was requested, ``False`` when only the box is repainted.
    """
    before = box.content_size
    if not box.is_mounted or not before.width or (box.styles.width is not None and box.styles.width.is_auto):
        box.update(content)
        return True
    box.update(content, layout=False)
    height = box.get_content_height(box.container_size, box.app.size, before.width)
    if height != before.height:
        box.refresh(layout=True)
        return True
    return False
