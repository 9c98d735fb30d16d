"""The console's key bindings as data, so ``[keys]`` is checked without importing Textual (CLI verbs).

Each view's bindings, inherited ones included, as ``(id, action, key)``; an id ``""`` is not remappable.
The app's (``TpuConsoleApp``) are active on every view. ``tests/unit/test_keymap.py`` fails when this
drifts from the screens' ``BINDINGS`` and prints the table to paste here.
"""

from __future__ import annotations

BINDINGS_BY_VIEW: dict[str, tuple[tuple[str, str, str], ...]] = {
    "BenchScreen": (
        ("bench_run", "run", "ctrl+r"),
        ("bench_back", "back_or_cancel", "escape"),
    ),
    "CommandScreen": (
        ("command_close", "close", "escape"),
        ("command_complete", "complete", "tab"),
    ),
    "CompareScreen": (
        ("compare_back", "close", "escape"),
        ("compare_swap", "swap_sides", "x"),
    ),
    "ConfirmScreen": (
        ("confirm_cancel", "cancel", "escape"),
        ("", "cancel", "n"),
        ("confirm_yes", "confirm", "y"),
    ),
    "ErrorScreen": (
        ("error_close", "close", "escape"),
    ),
    "ExportScreen": (
        ("export_cancel", "cancel", "escape"),
    ),
    "FleetScreen": (
        ("refresh", "refresh_fleet", "r"),
        ("filter", "filter", "slash"),
        ("clear_filter", "clear_filter", "escape"),
        ("raw_json", "toggle_raw", "j"),
        ("watch", "watch", "w"),
        ("swap", "swap", "s"),
        ("rollback", "rollback", "R"),
        ("bench", "bench", "b"),
        ("forward", "forward", "f"),
        ("metrics", "metrics", "m"),
        ("history", "history", "H"),
        ("request", "request", "n"),
        ("delete", "delete_qr", "d"),
        ("probe", "probe", "p"),
        ("detail", "toggle_detail", "i"),
        ("copy", "copy_row", "y"),
        ("sort", "cycle_sort", "o"),
        ("sort_reverse", "reverse_sort", "O"),
        ("shell", "shell", "S"),
    ),
    "ForwardsScreen": (
        ("forward_close", "close_forward", "x"),
        ("forward_copy", "copy_url", "y"),
        ("back", "back", "escape"),
    ),
    "HelpScreen": (
        ("help_close", "dismiss", "escape"),
        ("", "dismiss", "q"),
        ("", "dismiss", "question_mark"),
    ),
    "HistoryScreen": (
        ("filter", "focus_filter", "slash"),
        ("history_mark", "mark", "m"),
        ("history_compare", "compare", "c"),
        ("history_relaunch", "relaunch", "L"),
        ("history_export", "export", "e"),
        ("history_plot", "next_metric", "p"),
        ("history_node_only", "node_only", "N"),
        ("refresh", "reload", "r"),
        ("history_back", "back", "escape"),
    ),
    "LongLineScreen": (
        ("line_close", "close", "escape"),
        ("line_copy", "copy_line", "y"),
        ("line_copy_path", "copy_path", "p"),
    ),
    "MetricsScreen": (
        ("metrics_back", "back", "escape"),
    ),
    "RelaunchScreen": (
        ("swap_confirm", "swap_confirm", "ctrl+s"),
        ("swap_fix", "apply_fix", "f"),
        ("swap_rollback", "rollback", "ctrl+z"),
        ("swap_back", "back", "escape"),
        ("swap_copy", "copy_commands", "y,ctrl+y"),
    ),
    "RequestScreen": (
        ("request_create", "create", "ctrl+s"),
        ("request_probe", "probe", "ctrl+t"),
        ("request_back", "back", "escape"),
    ),
    "RollbackScreen": (
        ("swap_confirm", "swap_confirm", "ctrl+s"),
        ("swap_fix", "apply_fix", "f"),
        ("swap_rollback", "rollback", "ctrl+z"),
        ("swap_back", "back", "escape"),
        ("swap_copy", "copy_commands", "y,ctrl+y"),
        ("swap_confirm", "swap_confirm", "ctrl+s"),
    ),
    "StartupScreen": (
        ("log_follow", "toggle_follow", "f"),
        ("log_filter", "filter", "slash"),
        ("log_search", "search", "ctrl+f"),
        ("log_next", "next_match", "n"),
        ("log_fold", "toggle_fold", "z"),
        ("worker", "next_worker", "W"),
        ("reconnect", "reconnect", "r"),
        ("rollback", "rollback", "R"),
        ("swap", "swap", "s"),
        ("back", "back", "escape"),
        ("copy_url", "copy_url", "y"),
        ("log_whole_line", "whole_line", "e"),
    ),
    "SwapScreen": (
        ("swap_confirm", "swap_confirm", "ctrl+s"),
        ("swap_fix", "apply_fix", "f"),
        ("swap_rollback", "rollback", "ctrl+z"),
        ("swap_back", "back", "escape"),
        ("swap_copy", "copy_commands", "y,ctrl+y"),
    ),
    "TpuConsoleApp": (
        ("help", "help", "question_mark"),
        ("help_f1", "help", "f1"),
        ("command", "command", "colon"),
        ("forwards", "forwards", "F"),
        ("quit", "quit", "q"),
    ),
    "WorkloadStartupScreen": (
        ("workload_back", "back", "escape"),
    ),
    "WorkloadSwapScreen": (
        ("workload_patch", "patch", "ctrl+s"),
        ("workload_swap_back", "back", "escape"),
    ),
}
