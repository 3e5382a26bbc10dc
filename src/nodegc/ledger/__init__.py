"""The SQLite ledger: items, phases and their history, written before the side effects they guard."""
