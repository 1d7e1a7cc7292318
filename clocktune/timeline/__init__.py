"""The timeline format (docs/design.md §1): events, reading and writing, validation, derived facts."""

from clocktune.timeline.events import (
    AGENT_KINDS,
    KIND_SOURCE,
    Event,
    GroundTruth,
    GroundTruthCall,
    LatencyModel,
    Timeline,
    ToolSchema,
)
from clocktune.timeline.io import (
    Issue,
    TimelineFormatError,
    read_timelines,
    timeline_from_json,
    timeline_from_record,
    timeline_json_schema,
    timeline_to_json,
    timeline_to_record,
    write_timelines,
)
from clocktune.timeline.validate import validate_file, validate_timeline

__all__ = [
    "AGENT_KINDS",
    "KIND_SOURCE",
    "Event",
    "GroundTruth",
    "GroundTruthCall",
    "Issue",
    "LatencyModel",
    "Timeline",
    "TimelineFormatError",
    "ToolSchema",
    "read_timelines",
    "timeline_from_json",
    "timeline_from_record",
    "timeline_json_schema",
    "timeline_to_json",
    "timeline_to_record",
    "validate_file",
    "validate_timeline",
    "write_timelines",
]
