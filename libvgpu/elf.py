"""Just enough of an ELF file to tell whether the dynamic loader can preload it on this host.

`/etc/ld.so.preload` names a shared library that every process in a container
maps. A file that is not a shared object, an executable (even a
position-independent one, which is also ET_DYN but names a program
interpreter in a PT_INTERP program header), or a library built for another
machine would make every process in the container fail to start. Pure: parses
bytes, reads no files.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

from dra_driver.errors import DriverError

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
PT_INTERP = 3
_EI_CLASS = 4
_EI_DATA = 5
_CLASSES = {1: 32, 2: 64}
_BYTE_ORDERS: dict[int, Literal["little", "big"]] = {1: "little", 2: "big"}
_IDENTITY_BYTES = 20
"""e_ident (16), e_type (2), e_machine (2)."""

MACHINE_NAMES = {
    3: "x86 (i386)",
    8: "MIPS",
    20: "PowerPC",
    21: "PowerPC64",
    22: "S/390",
    40: "ARM",
    62: "x86-64",
    183: "AArch64",
    243: "RISC-V",
    258: "LoongArch",
}


class ElfFormatError(DriverError):
    """The bytes are not a well-formed ELF file; the message says what is wrong."""


@dataclass(frozen=True)
class ElfIdentity:
    """What must match between a library and the processes that load it."""

    bits: int
    byte_order: Literal["little", "big"]
    machine: int
    """e_machine."""

    def describe(self) -> str:
        name = MACHINE_NAMES.get(self.machine, "unknown machine")
        return f"{name} (e_machine {self.machine}, {self.bits}-bit {self.byte_order}-endian)"


@dataclass(frozen=True)
class ElfFile:
    identity: ElfIdentity
    file_type: int
    """e_type: 2 executable, 3 shared object (or position-independent executable)."""

    has_interpreter: bool
    """A PT_INTERP program header names a program interpreter: the file is an executable."""


def elf_identity(content: bytes) -> ElfIdentity:
    """Class, byte order and machine from the first bytes of an ELF file."""
    if len(content) < _IDENTITY_BYTES or content[:4] != ELF_MAGIC:
        raise ElfFormatError("not an ELF file")
    bits = _CLASSES.get(content[_EI_CLASS])
    if bits is None:
        raise ElfFormatError(f"invalid ELF class {content[_EI_CLASS]}")
    byte_order = _BYTE_ORDERS.get(content[_EI_DATA])
    if byte_order is None:
        raise ElfFormatError(f"invalid ELF data encoding {content[_EI_DATA]}")
    machine = int.from_bytes(content[18:20], byte_order)
    return ElfIdentity(bits, byte_order, machine)


def parse_elf(content: bytes) -> ElfFile:
    """Identity, file type and whether a program interpreter is named, bounds-checked."""
    identity = elf_identity(content)
    prefix = "<" if identity.byte_order == "little" else ">"
    if identity.bits == 64:
        header = struct.Struct(prefix + "16xHHIQQQIHHH")
    else:
        header = struct.Struct(prefix + "16xHHIIIIIHHH")
    if len(content) < header.size:
        raise ElfFormatError(f"ELF header truncated ({len(content)} bytes)")
    fields = header.unpack_from(content)
    file_type, phoff, phentsize, phnum = fields[0], fields[4], fields[8], fields[9]
    if phnum and phentsize < 4:
        raise ElfFormatError(f"program header entries of {phentsize} bytes")
    if phoff + phnum * phentsize > len(content):
        raise ElfFormatError("program header table runs past the end of the file")
    p_type = struct.Struct(prefix + "I")
    has_interpreter = any(
        p_type.unpack_from(content, phoff + index * phentsize)[0] == PT_INTERP
        for index in range(phnum)
    )
    return ElfFile(identity, file_type, has_interpreter)
