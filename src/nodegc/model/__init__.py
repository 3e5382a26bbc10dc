"""Pure data: frozen dataclasses shared by every layer. No I/O is imported here."""
