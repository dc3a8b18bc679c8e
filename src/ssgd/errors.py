"""The one exception type that means "the user's input is wrong".

`src/train.py` turns it into a single line on stderr and exit code 2. Raise it with a message that
names the offending config key or file and says what is allowed.
"""


class ConfigError(ValueError):
    """Bad configuration or missing input files: reported to the user as one line, never a trace."""
