"""The catalog: every protocol, attack and defense with its parameters and paper (from leakdemo.catalog)."""
import streamlit as st

st.set_page_config(page_title="leakdemo — Catalog", page_icon="📚", layout="wide")

from leakdemo.dashboard.catalog_page import main  # noqa: E402

main()
