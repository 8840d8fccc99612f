//! The Python client package (clients/python) against a real host.
