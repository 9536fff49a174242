"""Presenter mode: recorded showcases as full-screen scenes (leakdemo.dashboard.presenter)."""
from leakdemo.dashboard.presenter import main  # noqa: E402
from leakdemo.dashboard.shared import leave_legacy_pages_mode

leave_legacy_pages_mode()
main()
