"""A storage secret for the tests of the operators that submit Spark applications, and the check that it
reaches the application only through a private file."""

from __future__ import annotations

#: Must reach a Spark application without showing on its command line.
STORAGE_SECRET = "s3cr3t-token-for-the-submit-tests"


def assert_secret_only_in_private_files(commands: list[dict[str, object]], secret: str) -> None:
    """The secret is on no command line, and reaches the application through a file only its owner reads."""
    assert commands, "no spark-submit command was built"
    for built in commands:
        assert not any(secret in arg for arg in built["command"]), built["command"]  # type: ignore[union-attr]
        holding = [mode for mode, text in built["files"].values() if secret in text]  # type: ignore[union-attr]
        assert holding == [0o600], built["files"]
