"""Frames: any chunking reassembles; oversized or unknown frames are refused before the body."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.dataplane.codec import decode_batch, encode_message
from rayjet.dataplane.frames import (
    HEADER_SIZE,
    MAX_FRAME,
    Frame,
    FrameError,
    FrameReader,
    Kind,
    frame_header,
    message_room,
    pack_frame,
    raft_frames,
    read_frame,
)
from rayjet.raft.messages import Entry, Message, MessageType

frames = st.lists(st.builds(Frame, st.sampled_from(Kind), st.binary(max_size=300)), max_size=8)


def test_layout_is_big_endian_length_then_kind():
    assert pack_frame(Kind.RAFT, b"abc") == b"\x00\x00\x00\x03\x05abc"
    assert pack_frame(Kind.PING) == b"\x00\x00\x00\x00\x06"
    assert HEADER_SIZE == 5 and MAX_FRAME == 64 * 1024 * 1024


@settings(max_examples=150, deadline=None)
@given(frames, st.data())
def test_any_chunking_gives_the_frames_back(sent, data):
    wire = b"".join(pack_frame(f.kind, f.payload) for f in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    reader, got = FrameReader(max_frame=300), []
    for a, b in zip([0, *cuts], [*cuts, len(wire)]):
        got += reader.feed(wire[a:b])
    assert got == sent and reader.buffered == 0


def test_raft_frames_split_only_at_max_frame():
    ms = [Message(MessageType.APP, "b", "a", index=i, entries=[Entry(1, i, b"e" * (i * 7))])
          for i in range(60)]
    encoded = [encode_message(m) for m in ms]
    assert max(map(len, encoded)) <= message_room("grp", 1000)
    got = FrameReader(max_frame=1000).feed(b"".join(raft_frames("grp", encoded, 1000)))
    assert len(got) > 1 and all(f.kind == Kind.RAFT for f in got)
    assert [m for f in got for m in decode_batch(f.payload)[1]] == ms
    whole = FrameReader().feed(b"".join(raft_frames("grp", encoded, MAX_FRAME)))
    assert len(whole) == 1 and decode_batch(whole[0].payload) == ("grp", ms)
    assert raft_frames("grp", [], 1000) == []


def test_oversized_frame_refused_from_its_header_alone():
    reader = FrameReader(max_frame=1000)
    assert reader.feed(pack_frame(Kind.RAFT, b"x" * 1000)) == [Frame(Kind.RAFT, b"x" * 1000)]
    with pytest.raises(FrameError, match="over the 1000-byte limit"):
        reader.feed(frame_header(Kind.RAFT, 1001))  # no body needed to refuse
    with pytest.raises(FrameError):  # the stream is out of step for good
        reader.feed(pack_frame(Kind.PING))


@pytest.mark.parametrize("kind", [0, 11, 255])
def test_unknown_kind_refused(kind):
    with pytest.raises(FrameError, match="unknown frame kind"):
        FrameReader().feed(struct.pack(">IB", 0, kind))
    with pytest.raises(FrameError):
        frame_header(kind, 0)


def test_max_frame_must_be_a_u32():
    for bad in (0, -1, 2**32, 1.5):
        with pytest.raises(ValueError):
            FrameReader(max_frame=bad)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_fuzz_arbitrary_bytes_only_frame_error(chunks):
    reader = FrameReader(max_frame=128)
    try:
        for chunk in chunks:
            for frame in reader.feed(chunk):
                assert isinstance(frame.kind, Kind) and len(frame.payload) <= 128
    except FrameError:
        pass


@settings(max_examples=300, deadline=None)
@given(frames, st.integers(0, 10_000), st.integers(0, 7))
def test_fuzz_bit_flips_only_frame_error(sent, where, bit):
    wire = bytearray(b"".join(pack_frame(f.kind, f.payload) for f in sent))
    if wire:
        wire[where % len(wire)] ^= 1 << bit
    try:
        for frame in FrameReader(max_frame=300).feed(wire):
            assert isinstance(frame.kind, Kind) and len(frame.payload) <= 300
    except FrameError:
        pass


def _stream(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


def test_read_frame():
    async def main():
        reader = _stream(pack_frame(Kind.RAFT, b"abc") + pack_frame(Kind.PONG))
        assert await read_frame(reader) == Frame(Kind.RAFT, b"abc")
        assert await read_frame(reader) == Frame(Kind.PONG, b"")
        assert await read_frame(reader) is None  # clean end between frames
        with pytest.raises(FrameError, match="inside a frame header"):
            await read_frame(_stream(b"\x00\x00"))
        with pytest.raises(FrameError, match="inside a RAFT frame"):
            await read_frame(_stream(pack_frame(Kind.RAFT, b"abc")[:-1]))
        with pytest.raises(FrameError, match="unknown frame kind"):
            await read_frame(_stream(b"\x00\x00\x00\x00\x63"))
        # refused without waiting for a body that never comes (no EOF fed)
        oversized = _stream(frame_header(Kind.RAFT, 2**31), eof=False)
        with pytest.raises(FrameError, match="over the"):
            await asyncio.wait_for(read_frame(oversized, max_frame=1024), 1)

    asyncio.run(main())
