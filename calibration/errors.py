"""The one error type of calibration: bad input, said in one line naming the file."""


class CalibrationError(Exception):
    """Bad calibration input; ``str()`` is the one line the CLI prints."""
