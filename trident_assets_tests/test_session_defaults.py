"""Sessions built by trident_assets: what their defaults change in how PySpark talks to the JVM."""

from __future__ import annotations

from typing import Any

import pytest

from trident_assets.spark.session import DEBUGGING_CONF


def test_functions_send_no_python_call_site_to_the_jvm(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DataFrame debugging off: ``F.*`` calls neither look the session up nor set an origin."""
    from py4j.clientserver import ClientServerConnection
    from pyspark.errors.utils import is_debugging_enabled
    from pyspark.sql import functions as F

    sent: list[str] = []
    send = ClientServerConnection.send_command

    def recording(self: Any, command: str) -> Any:
        sent.append(command)
        return send(self, command)

    assert spark.conf.get(DEBUGGING_CONF) == "false"
    assert is_debugging_enabled() is False
    monkeypatch.setattr(ClientServerConnection, "send_command", recording)
    column = F.when(F.col("n") > F.lit(1), F.upper(F.col("word")))
    monkeypatch.undo()
    assert str(column) == "Column<'CASE WHEN >(n, 1) THEN upper(word) END'>"
    assert sent, "the column was built in the JVM"
    assert not [c for c in sent if "PySparkCurrentOrigin" in c or "getActiveSession" in c]
