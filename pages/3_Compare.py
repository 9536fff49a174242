"""Compare and replay recorded runs side by side (leakdemo.dashboard.compare)."""
from leakdemo.dashboard.compare import main  # noqa: E402
from leakdemo.dashboard.shared import leave_legacy_pages_mode

leave_legacy_pages_mode()
main()
