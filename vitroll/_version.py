"""The package's version, in a module of its own so that any module can name it without importing the facade
(``vitroll/__init__.py``), which imports every floor of the package. pyproject.toml states the same number."""

__version__ = "0.1.0"
