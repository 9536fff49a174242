"""The dashboard's helpers: the only part of leakdemo that imports streamlit (pool.py does not need to)."""
