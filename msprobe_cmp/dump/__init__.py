"""The dump format: the contract shared by the recorder (writes it) and the comparator (reads it)."""

from msprobe_cmp.dump.naming import ParsedName, api_name, cell_name, parameters_grad_name, parse_name, tensor_file_name
from msprobe_cmp.dump.reader import Dump, RankDump, load_dump, scan_dump
from msprobe_cmp.dump.schema import STAT_KEYS, DumpMeta, Entry, JsonObject, Map, Node, Seq, TensorLeaf, ValueLeaf
from msprobe_cmp.dump.writer import DumpWriter

__all__ = [
    "STAT_KEYS",
    "Dump",
    "DumpMeta",
    "DumpWriter",
    "Entry",
    "JsonObject",
    "Map",
    "Node",
    "ParsedName",
    "RankDump",
    "Seq",
    "TensorLeaf",
    "ValueLeaf",
    "api_name",
    "cell_name",
    "load_dump",
    "scan_dump",
    "parameters_grad_name",
    "parse_name",
    "tensor_file_name",
]
