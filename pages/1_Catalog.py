"""The catalog: every protocol, attack and defense with its parameters and paper (from leakdemo.catalog)."""
from leakdemo.dashboard.catalog_page import main  # noqa: E402
from leakdemo.dashboard.shared import leave_legacy_pages_mode

leave_legacy_pages_mode()
main()
