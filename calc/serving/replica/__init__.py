"""One engine replica: its GPUs, dtypes and scheduler (capacity.Replica), its KV pages (kvbudget), a cached prefix's pages (prefix), and what one request alone takes (floors)."""
