package policydns

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestTable(t *testing.T, ttl time.Duration) (*Table, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	tb, err := NewTable(ttl, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return tb, c
}

var realAddr = []netip.Addr{netip.MustParseAddr("198.51.100.7")}

func TestTableMapsIntoTheSyntheticRange(t *testing.T) {
	tb, c := newTestTable(t, 10*time.Second)
	m, err := tb.Map("echo.test", realAddr, []int{7007}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !SyntheticRange.Contains(m.Synthetic) || m.Synthetic == SyntheticRange.Addr() {
		t.Errorf("synthetic %v outside %v (or its network address)", m.Synthetic, SyntheticRange)
	}
	again, _ := tb.Map("echo.test", realAddr, []int{7007}, 4)
	if again.Synthetic != m.Synthetic || again.Generation != 4 {
		t.Errorf("renewed mapping %+v, want the same address with the new generation", again)
	}
	other, _ := tb.Map("db.test", realAddr, []int{5432}, 3)
	if other.Synthetic == m.Synthetic || other.ID == m.ID {
		t.Errorf("two names share %v / %s", m.Synthetic, m.ID)
	}

	got, err := tb.Lookup(netip.AddrPortFrom(m.Synthetic, 7007))
	if err != nil || got.Name != "echo.test" || got.Real[0] != realAddr[0] {
		t.Errorf("lookup: %+v, %v", got, err)
	}
	if _, err := tb.Lookup(netip.AddrPortFrom(m.Synthetic, 22)); !errors.Is(err, ErrWrongPort) {
		t.Errorf("wrong port: %v, want ErrWrongPort", err)
	}
	if !tb.Range().Contains(m.Synthetic) {
		t.Errorf("synthetic %v outside the epoch's range %v", m.Synthetic, tb.Range())
	}
	// An address of the epoch's range never handed out.
	unused := tb.Range().Addr().Next()
	for unused == m.Synthetic || unused == other.Synthetic {
		unused = unused.Next()
	}
	if _, err := tb.Lookup(netip.AddrPortFrom(unused, 7007)); !errors.Is(err, ErrNoMapping) {
		t.Errorf("never handed out: %v, want ErrNoMapping", err)
	}
	c.t = c.t.Add(10 * time.Second)
	if _, err := tb.Lookup(netip.AddrPortFrom(m.Synthetic, 7007)); !errors.Is(err, ErrExpired) {
		t.Errorf("after the TTL: %v, want ErrExpired", err)
	}
	// A query after expiry maps again: a fresh address, the old retired.
	fresh, _ := tb.Map("echo.test", realAddr, []int{7007}, 5)
	if fresh.Synthetic == m.Synthetic {
		t.Errorf("expired mapping's address %v handed out again", m.Synthetic)
	}
	if _, err := tb.Lookup(netip.AddrPortFrom(m.Synthetic, 7007)); !errors.Is(err, ErrNoMapping) {
		t.Errorf("retired address: %v, want ErrNoMapping", err)
	}
}

// Random epochs (a proxy no supervisor numbers): an address handed out
// by one table is unknown to the next, whichever ranges they drew.
func TestTableEpochs(t *testing.T) {
	a, _ := newTestTable(t, 10*time.Second)
	b, _ := newTestTable(t, 10*time.Second)
	if a.Epoch() == b.Epoch() {
		t.Fatal("two tables share an epoch")
	}
	ma, _ := a.Map("echo.test", realAddr, []int{7}, 1)
	mb, _ := b.Map("echo.test", realAddr, []int{7}, 1)
	if ma.Synthetic == mb.Synthetic {
		t.Errorf("both epochs start at %v", ma.Synthetic)
	}
	if _, err := b.Lookup(netip.AddrPortFrom(ma.Synthetic, 7)); !errors.Is(err, ErrNoMapping) && !errors.Is(err, ErrOtherEpoch) {
		t.Errorf("previous epoch's address: %v, want ErrNoMapping or ErrOtherEpoch", err)
	}
}

// Numbered epochs (sandboxnet advances a persisted one before every
// proxy start): consecutive epochs draw from disjoint ranges of
// SyntheticRange, so an address a client cached before a proxy restart
// is refused as another epoch's, never mapped to another name.
func TestTableNumberedEpochsAreDisjoint(t *testing.T) {
	seen := map[netip.Prefix]uint64{}
	for e := uint64(0); e < EpochRanges; e++ {
		r := EpochRange(e)
		if r.Bits() != 21 || !SyntheticRange.Contains(r.Addr()) || !SyntheticRange.Contains(r.Masked().Addr().Next()) {
			t.Fatalf("epoch %d: range %v not a /21 inside %v", e, r, SyntheticRange)
		}
		if prev, dup := seen[r]; dup {
			t.Fatalf("epochs %d and %d share %v", prev, e, r)
		}
		seen[r] = e
	}
	if EpochRange(EpochRanges+5) != EpochRange(5) {
		t.Error("epochs do not cycle through the ranges")
	}
	if last := EpochRange(EpochRanges - 1); last.Addr() != netip.MustParseAddr("198.19.248.0") {
		t.Errorf("last range %v, want 198.19.248.0/21 (the /15's end)", last)
	}

	c := &clock{t: time.Unix(1_800_000_000, 0)}
	old, err := NewTableEpoch(41, 10*time.Second, c.now)
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := NewTableEpoch(42, 10*time.Second, c.now)
	cached, _ := old.Map("db.test", realAddr, []int{5432}, 1)
	if !old.Range().Contains(cached.Synthetic) || cached.Synthetic == old.Range().Addr() {
		t.Fatalf("epoch 41 handed out %v, outside %v (or its network address)", cached.Synthetic, old.Range())
	}
	// The new epoch fills its whole capacity: none of it reuses the
	// cached address, which stays refused.
	for i := range MaxMappings {
		m, err := cur.Map(fmt.Sprintf("n%d.test", i), realAddr, []int{5432}, 1)
		if err != nil {
			t.Fatalf("mapping %d: %v", i, err)
		}
		if !cur.Range().Contains(m.Synthetic) || m.Synthetic == cached.Synthetic {
			t.Fatalf("epoch 42 handed out %v (range %v, cached %v)", m.Synthetic, cur.Range(), cached.Synthetic)
		}
	}
	if _, err := cur.Lookup(netip.AddrPortFrom(cached.Synthetic, 5432)); !errors.Is(err, ErrOtherEpoch) {
		t.Errorf("a connection to the previous epoch's address: %v, want ErrOtherEpoch", err)
	}
}

func TestTableLimits(t *testing.T) {
	if _, err := NewTable(0, nil); err == nil {
		t.Error("TTL 0 accepted")
	}
	if _, err := NewTable(31*time.Second, nil); err == nil {
		t.Error("TTL 31s accepted")
	}
	tb, c := newTestTable(t, 5*time.Second)
	many := make([]netip.Addr, 40)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
	}
	m, _ := tb.Map("wide.test", many, []int{1}, 1)
	if len(m.Real) != MaxAddrs {
		t.Errorf("kept %d real addresses, want %d", len(m.Real), MaxAddrs)
	}
	for i := 1; i < MaxMappings; i++ {
		if _, err := tb.Map(fmt.Sprintf("n%d.test", i), realAddr, []int{1}, 1); err != nil {
			t.Fatalf("mapping %d: %v", i, err)
		}
	}
	if _, err := tb.Map("one-too-many.test", realAddr, []int{1}, 1); !errors.Is(err, ErrFull) {
		t.Errorf("mapping %d: %v, want ErrFull", MaxMappings+1, err)
	}
	if tb.Live() != MaxMappings {
		t.Errorf("live %d, want %d", tb.Live(), MaxMappings)
	}
	// Expired mappings make room; live ones never do.
	c.t = c.t.Add(5 * time.Second)
	if _, err := tb.Map("after-expiry.test", realAddr, []int{1}, 1); err != nil {
		t.Errorf("after every mapping expired: %v", err)
	}
	if _, err := tb.Map("x.test", nil, []int{1}, 1); err == nil {
		t.Error("a mapping without a real address was made")
	}
}
