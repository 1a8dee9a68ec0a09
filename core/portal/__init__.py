"""The portal's own concerns that are not pages: who may use it (access) and the
first-start demo data."""
