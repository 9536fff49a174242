"""Defense trade-offs: sweeps of a defense's strength, privacy against utility (leakdemo.dashboard.tradeoffs)."""
from leakdemo.dashboard.shared import leave_legacy_pages_mode
from leakdemo.dashboard.tradeoffs import main  # noqa: E402

leave_legacy_pages_mode()
main()
