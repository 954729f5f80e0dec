"""MindSpore ↔ PyTorch name mapping: built-in tables (data), user mapping files, canonical views.

Public API:

* :func:`load_cell_mapping`, :func:`load_api_mapping`: read and validate the user's files (msprobe's
  ``-cm`` / ``-am`` formats; one-line :class:`~msprobe_cmp.errors.ConfigError` on anything wrong);
* :class:`NameMapping`: the parsed files, passed to the comparator (``CompareOptions.mapping``);
* :func:`load_builtin_tables`: the built-in API / Primitive / composite / Cell-class tables
  (``ms_to_pt_api.yaml``, ``cell_classes.yaml`` beside this file);
* :func:`framework_namespace`, :func:`build_views`, :func:`build_unit_views`: what the matcher uses to pair two
  frameworks' entries (the latter with the cell pairs :func:`infer_cell_pairs` finds when paths or classes differ);
* :func:`render_cell_mapping`: inferred pairs as a cell-mapping file (``--write-mapping``).

How to write the files: ``docs/mapping.md``.
"""

from msprobe_cmp.comparator.mapping.canonical import (
    INTERMEDIATE,
    NO_COUNTERPART,
    UNMAPPED,
    EntryView,
    NameMapping,
    Namespace,
    ViewItem,
    build_unit_views,
    build_views,
    framework_namespace,
    is_structural_note,
    label_contradiction,
    names_namespace,
    resolve_gradients,
    unused_mapping_keys,
)
from msprobe_cmp.comparator.mapping.files import (
    MAX_MAPPING_FILE_BYTES,
    ApiMappingRecord,
    ApiMappingRecords,
    FusedRecord,
    load_api_mapping,
    load_cell_mapping,
    parse_api_mapping,
    parse_cell_mapping,
)
from msprobe_cmp.comparator.mapping.infer import (
    INFERRED_LABEL,
    CellCall,
    InferredCells,
    cell_calls,
    infer_cell_pairs,
    mapping_file_pairs,
    render_cell_mapping,
)
from msprobe_cmp.comparator.mapping.tables import ArgMap, BuiltinTables, CellClassMap, Composite, load_builtin_tables

__all__ = [
    "INFERRED_LABEL",
    "INTERMEDIATE",
    "NO_COUNTERPART",
    "MAX_MAPPING_FILE_BYTES",
    "UNMAPPED",
    "ApiMappingRecord",
    "ApiMappingRecords",
    "ArgMap",
    "BuiltinTables",
    "CellCall",
    "CellClassMap",
    "Composite",
    "EntryView",
    "FusedRecord",
    "InferredCells",
    "NameMapping",
    "Namespace",
    "ViewItem",
    "build_unit_views",
    "build_views",
    "cell_calls",
    "framework_namespace",
    "infer_cell_pairs",
    "is_structural_note",
    "label_contradiction",
    "load_api_mapping",
    "load_builtin_tables",
    "load_cell_mapping",
    "mapping_file_pairs",
    "names_namespace",
    "parse_api_mapping",
    "parse_cell_mapping",
    "render_cell_mapping",
    "resolve_gradients",
    "unused_mapping_keys",
]
