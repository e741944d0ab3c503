package finalizer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Pack and pack-index layout (git's Documentation/gitformat-pack.txt):
// a pack is "PACK", a version (2 or 3), an object count, the objects and
// a trailer holding the hash of everything before it; a version 2 index
// is "\377tOc", version 2, a fan-out table of 256 cumulative counts (the
// last is the object count), then per object its name, a CRC32 and a
// 4-byte offset, then 8-byte offsets for objects beyond 2 GiB, then the
// pack's trailer and the index's own hash.
const (
	packHeaderLen = 12
	idxHeaderLen  = 8 + 256*4
	// minPackEntry is the fewest bytes one object takes in a pack (a
	// type-and-size byte and at least one byte of zlib data; a real one
	// takes at least 9): a count the file cannot hold is refused before
	// anything reads the objects.
	minPackEntry = 2
)

var (
	packMagic = []byte("PACK")
	idxMagic  = []byte{0xff, 't', 'O', 'c'}
)

// checkPackPair reads only the header and trailer of a pack and the
// header, fan-out table and trailer of its index, and reports why they
// cannot be a matching pair: a wrong magic or version, a fan-out table
// that decreases, an index whose size does not follow from its object
// count, counts that differ, a count the pack cannot hold, or a pack
// checksum in the index that is not the pack's trailer. It runs before
// anything copies the pack (git fsck in the mirror then checks every
// object), so a pack that is not one is refused by name at the cost of
// a few reads.
func checkPackPair(pack io.ReaderAt, packSize int64, idx io.ReaderAt, idxSize int64, hashLen int) (packWhy, idxWhy string) {
	h := int64(hashLen)
	if packSize < packHeaderLen+h {
		return fmt.Sprintf("%d bytes, too short for a pack", packSize), ""
	}
	hdr := make([]byte, packHeaderLen)
	if _, err := pack.ReadAt(hdr, 0); err != nil {
		return "unreadable pack header: " + err.Error(), ""
	}
	if !bytes.Equal(hdr[:4], packMagic) {
		return "not a pack (no PACK signature)", ""
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return fmt.Sprintf("pack version %d (git writes 2 or 3)", v), ""
	}
	count := int64(binary.BigEndian.Uint32(hdr[8:12]))
	if count*minPackEntry > packSize-packHeaderLen-h {
		return fmt.Sprintf("claims %d objects in %d bytes", count, packSize), ""
	}
	trailer := make([]byte, hashLen)
	if _, err := pack.ReadAt(trailer, packSize-h); err != nil {
		return "unreadable pack trailer: " + err.Error(), ""
	}

	if idxSize < idxHeaderLen+2*h {
		return "", fmt.Sprintf("%d bytes, too short for a pack index", idxSize)
	}
	ih := make([]byte, idxHeaderLen)
	if _, err := idx.ReadAt(ih, 0); err != nil {
		return "", "unreadable index header: " + err.Error()
	}
	if !bytes.Equal(ih[:4], idxMagic) || binary.BigEndian.Uint32(ih[4:8]) != 2 {
		return "", "not a version 2 pack index"
	}
	prev := uint32(0)
	for i := 0; i < 256; i++ {
		n := binary.BigEndian.Uint32(ih[8+4*i:])
		if n < prev {
			return "", fmt.Sprintf("fan-out entry %d decreases", i)
		}
		prev = n
	}
	n := int64(prev)
	if n != count {
		return "", fmt.Sprintf("lists %d objects, its pack holds %d", n, count)
	}
	base := int64(idxHeaderLen) + n*(h+4+4) + 2*h
	large := idxSize - base
	if large < 0 || large%8 != 0 || large/8 > n {
		return "", fmt.Sprintf("%d bytes, not the size of an index of %d objects", idxSize, n)
	}
	sum := make([]byte, hashLen)
	if _, err := idx.ReadAt(sum, idxSize-2*h); err != nil {
		return "", "unreadable index trailer: " + err.Error()
	}
	if !bytes.Equal(sum, trailer) {
		return "", "names another pack (its pack checksum is not this pack's trailer)"
	}
	return "", ""
}

// looseHeaderOK reports whether b (a loose object's first two bytes)
// starts a zlib stream: deflate, a window of at most 32 KiB, a valid
// header check.
func looseHeaderOK(b []byte) bool {
	return len(b) == 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
}
