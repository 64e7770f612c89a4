"""Log lines as text or as JSON, with the same fields.

Every line about a message starts ``seq=N Type ...`` (the loop's
convention, e.g. ``seq=3 IPSetUpdate rejected: field members[1]=...``), so
the JSON form lifts ``seq`` and the message type out of it rather than
every call site passing them twice. A record may also carry them, and an
object id, as ``extra={"seq": ..., "msg_type": ..., "object_id": ...}``.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime

__all__ = ["LOG_FORMATS", "TEXT_FORMAT", "JSONFormatter", "formatter"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")

# "seq=12 WorkloadEndpointUpdate ..." or "seq=12 workload_endpoint_update ..."
_SEQ = re.compile(r"seq=(\d+) (\w+)")


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, seq, type, object id."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        seq = getattr(record, "seq", None)
        msg_type = getattr(record, "msg_type", None)
        if seq is None and (match := _SEQ.match(message)):
            seq, msg_type = int(match[1]), match[2]
        if seq is not None:
            out["seq"] = seq
        if msg_type is not None:
            out["type"] = msg_type
        object_id = getattr(record, "object_id", None)
        if object_id is not None:
            out["object_id"] = object_id
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def formatter(kind: str) -> logging.Formatter:
    """The formatter of ``--log-format`` ``kind`` (``text`` or ``json``)."""
    if kind == "json":
        return JSONFormatter()
    return logging.Formatter(TEXT_FORMAT)
