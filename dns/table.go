package dns

import (
	"encoding/binary"
	"net/netip"
	"sync"
)

// table maps names to fake addresses and back.
//
// Every name gets one slot number i in [1, size]; its IPv4 address is the
// V4 pool's base + i and its IPv6 address the V6 pool's base + i, so both
// directions are an index computation plus one map or slice lookup. Slot 0
// (the pool's network address) and the pool's last address are never
// handed out. Slots are allocated in order; once all are taken, the least
// recently used name (by lookup from either side) gives up its slot.
//
// A table is safe for concurrent use.
type table struct {
	v4, v6 netip.Prefix
	// v4base and v6base are the pools' first addresses in integer form
	// (v6: the low 32 bits; the high 96 must match v6hi).
	v4base uint32
	v6hi   [12]byte
	v6lo   uint32
	size   int // usable slots: 1..size

	// mu guards everything below.
	mu     sync.Mutex
	byName map[string]*entry
	slots  []*entry // slots[i] holds slot i; slots[0] is unused
	// head is the most recently used entry, tail the least; they link
	// through entry.prev/next.
	head, tail *entry
}

type entry struct {
	name       string
	slot       uint32
	prev, next *entry
}

// newTable returns an empty table over the given pools (already masked and
// validated) holding at most size names.
func newTable(v4, v6 netip.Prefix, size int) *table {
	t := &table{v4: v4, v6: v6, size: size, byName: make(map[string]*entry)}
	b4 := v4.Addr().As4()
	t.v4base = binary.BigEndian.Uint32(b4[:])
	b6 := v6.Addr().As16()
	copy(t.v6hi[:], b6[:12])
	t.v6lo = binary.BigEndian.Uint32(b6[12:])
	t.slots = make([]*entry, 1, 1024)
	return t
}

// poolSlots is the number of usable slots in p: all addresses but the
// first and the last, capped so the arithmetic stays in 32 bits.
func poolSlots(p netip.Prefix) int {
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits >= 31 {
		return 1<<31 - 2
	}
	return 1<<hostBits - 2
}

// addr4 and addr6 return the addresses of slot i.
func (t *table) addr4(i uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], t.v4base+i)
	return netip.AddrFrom4(b)
}

func (t *table) addr6(i uint32) netip.Addr {
	var b [16]byte
	copy(b[:12], t.v6hi[:])
	binary.BigEndian.PutUint32(b[12:], t.v6lo+i)
	return netip.AddrFrom16(b)
}

// slotOf returns the slot an address in either pool stands for, or 0.
// IPv4-mapped IPv6 addresses are unmapped first.
func (t *table) slotOf(a netip.Addr) uint32 {
	a = a.Unmap()
	var off uint32
	switch {
	case a.Is4() && t.v4.Contains(a):
		b := a.As4()
		off = binary.BigEndian.Uint32(b[:]) - t.v4base
	case a.Is6() && t.v6.Contains(a.WithZone("")):
		b := a.As16()
		if [12]byte(b[:12]) != t.v6hi {
			return 0
		}
		off = binary.BigEndian.Uint32(b[12:]) - t.v6lo
	default:
		return 0
	}
	if off == 0 || int64(off) > int64(t.size) {
		return 0
	}
	return off
}

// contains reports whether a lies inside either pool, allocated or not.
func (t *table) contains(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	return t.v4.Contains(a) || t.v6.Contains(a)
}

// lookup returns the slot of name, allocating one (and evicting the least
// recently used name when full) if it has none. name must be normalized.
func (t *table) lookup(name string) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byName[name]; ok {
		t.touch(e)
		return e.slot
	}
	var e *entry
	if len(t.slots)-1 < t.size {
		e = &entry{slot: uint32(len(t.slots))}
		t.slots = append(t.slots, e)
	} else {
		e = t.tail
		t.unlink(e)
		delete(t.byName, e.name)
	}
	e.name = name
	t.byName[name] = e
	t.pushFront(e)
	return e.slot
}

// nameOf returns the name holding slot i and marks it used.
func (t *table) nameOf(i uint32) (string, bool) {
	if i == 0 {
		return "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(i) >= len(t.slots) {
		return "", false
	}
	e := t.slots[i]
	t.touch(e)
	return e.name, true
}

// len returns the number of names held.
func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byName)
}

func (t *table) touch(e *entry) {
	if t.head == e {
		return
	}
	t.unlink(e)
	t.pushFront(e)
}

func (t *table) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *table) pushFront(e *entry) {
	e.next = t.head
	if t.head != nil {
		t.head.prev = e
	}
	t.head = e
	if t.tail == nil {
		t.tail = e
	}
}
