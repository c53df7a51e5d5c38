"""The version of l2m: the package's (``l2m.__version__``), the wheel's (pyproject reads it),
``l2m_build_info``'s and CHANGELOG.md's newest entry's (a test keeps them equal)."""

__version__ = "0.3.0.dev0"
