"""The reference semantics: the NumPy interpreter every executor and importer checks against."""
