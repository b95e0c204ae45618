"""ELF identity, type and program interpreter from hand-built headers (no compiler needed)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libvgpu.elf import ElfFormatError, ElfIdentity, elf_identity, parse_elf

PT_LOAD, PT_INTERP, PT_DYNAMIC = 1, 3, 2


def build_elf(
    *,
    bits: int = 64,
    order: str = "<",
    file_type: int = 3,
    machine: int = 62,
    program_headers: tuple[int, ...] = (PT_LOAD, PT_DYNAMIC),
) -> bytes:
    """An ELF header, then its program header table (types only; the rest zero)."""
    elf_class = 2 if bits == 64 else 1
    data = 1 if order == "<" else 2
    ident = b"\x7fELF" + bytes([elf_class, data, 1]) + bytes(9)
    if bits == 64:
        header_size, entry_size = 64, 56
        header = struct.pack(
            order + "HHIQQQIHHHHHH",
            file_type, machine, 1, 0, header_size, 0, 0, header_size, entry_size,
            len(program_headers), 64, 0, 0,
        )  # fmt: skip
    else:
        header_size, entry_size = 52, 32
        header = struct.pack(
            order + "HHIIIIIHHHHHH",
            file_type, machine, 1, 0, header_size, 0, 0, header_size, entry_size,
            len(program_headers), 40, 0, 0,
        )  # fmt: skip
    table = b"".join(
        struct.pack(order + "I", p_type) + bytes(entry_size - 4) for p_type in program_headers
    )
    return ident + header + table


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("order", ["<", ">"])
def test_shared_library_reads_as_such(bits, order):
    elf = parse_elf(build_elf(bits=bits, order=order, machine=183))

    assert elf.identity == ElfIdentity(bits, "little" if order == "<" else "big", 183)
    assert (elf.file_type, elf.has_interpreter) == (3, False)


@pytest.mark.parametrize("bits", [32, 64])
def test_program_interpreter_marks_an_executable(bits):
    elf = parse_elf(build_elf(bits=bits, program_headers=(PT_LOAD, PT_INTERP, PT_DYNAMIC)))

    assert elf.has_interpreter


def test_identity_needs_only_the_first_twenty_bytes():
    assert elf_identity(build_elf(machine=243)[:20]) == ElfIdentity(64, "little", 243)


def test_description_names_the_machine():
    assert ElfIdentity(64, "little", 183).describe() == (
        "AArch64 (e_machine 183, 64-bit little-endian)"
    )
    assert "unknown machine (e_machine 9999" in ElfIdentity(64, "big", 9999).describe()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"#!/bin/sh\n", "not an ELF file"),
        (b"\x7fELF" + bytes([3, 1]) + bytes(14), "invalid ELF class 3"),
        (b"\x7fELF" + bytes([2, 7]) + bytes(14), "invalid ELF data encoding 7"),
        (build_elf()[:40], "ELF header truncated"),
        (build_elf(program_headers=(PT_LOAD, PT_INTERP))[:100], "runs past the end"),
    ],
)
def test_damaged_headers_are_typed_errors(content, message):
    with pytest.raises(ElfFormatError, match=message):
        parse_elf(content)


@given(st.binary(max_size=256))
def test_any_bytes_parse_or_give_a_typed_error(content):
    try:
        elf = parse_elf(b"\x7fELF" + content)
    except ElfFormatError:
        return
    assert elf.identity.bits in (32, 64)
    assert isinstance(elf.has_interpreter, bool)
