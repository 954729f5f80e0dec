"""MindSpore ↔ PyTorch name mapping: built-in tables (data), user mapping files, canonical views.

Public API:

* :func:`load_cell_mapping`, :func:`load_api_mapping`: read and validate the user's files (msprobe's
  ``-cm`` / ``-am`` formats; one-line :class:`~msprobe_cmp.errors.ConfigError` on anything wrong);
* :class:`NameMapping`: the parsed files, passed to the comparator (``CompareOptions.mapping``);
* :func:`load_builtin_tables`: the built-in API / Primitive / composite / Cell-class tables
  (``ms_to_pt_api.yaml``, ``cell_classes.yaml`` beside this file);
* :func:`framework_namespace`, :func:`build_views`: what the matcher uses to pair two frameworks' entries.

How to write the files: ``docs/mapping.md``.
"""

from msprobe_cmp.comparator.mapping.canonical import (
    INTERMEDIATE,
    UNMAPPED,
    EntryView,
    NameMapping,
    Namespace,
    ViewItem,
    build_views,
    framework_namespace,
    label_contradiction,
    names_namespace,
    resolve_gradients,
    unused_mapping_keys,
)
from msprobe_cmp.comparator.mapping.files import (
    MAX_MAPPING_FILE_BYTES,
    ApiMappingRecord,
    load_api_mapping,
    load_cell_mapping,
    parse_api_mapping,
    parse_cell_mapping,
)
from msprobe_cmp.comparator.mapping.tables import BuiltinTables, CellClassMap, Composite, load_builtin_tables

__all__ = [
    "INTERMEDIATE",
    "MAX_MAPPING_FILE_BYTES",
    "UNMAPPED",
    "ApiMappingRecord",
    "BuiltinTables",
    "CellClassMap",
    "Composite",
    "EntryView",
    "NameMapping",
    "Namespace",
    "ViewItem",
    "build_views",
    "framework_namespace",
    "label_contradiction",
    "load_api_mapping",
    "load_builtin_tables",
    "load_cell_mapping",
    "names_namespace",
    "parse_api_mapping",
    "parse_cell_mapping",
    "resolve_gradients",
    "unused_mapping_keys",
]
