"""The catalog: every protocol, attack and defense with its parameters and paper (from leakdemo.catalog)."""
from leakdemo.dashboard.catalog_page import main  # noqa: E402

main()
