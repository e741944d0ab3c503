package policydns

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Limits of seed 004.
const (
	MaxMappings     = 1024
	MaxAddrs        = 16
	MaxMessage      = 8192
	MaxCNAMEHops    = 8
	MaxConcurrent   = 64
	ExchangeTimeout = 2 * time.Second
	MinTTL          = time.Second
	MaxTTL          = 30 * time.Second
)

// SyntheticRange is where synthetic addresses come from.
var SyntheticRange = netip.MustParsePrefix("198.18.0.0/15")

// EpochRanges is how many disjoint ranges SyntheticRange is cut into: a
// boot epoch takes its addresses from range epoch mod EpochRanges
// (EpochRange), so an address handed out in one epoch is never handed
// out in the next EpochRanges-1 (seed 004: an address cached from the
// preceding epoch must not inherit a new mapping).
const EpochRanges = 64

// epochBits is the prefix length of an epoch's range: 64 /21s of the /15.
const epochBits = 21

// epochSize is the number of usable addresses of an epoch's range: the
// /21 less its first and last, more than MaxMappings.
const epochSize = 1<<(32-epochBits) - 2

// EpochRange is the part of SyntheticRange that epoch's addresses come
// from.
func EpochRange(epoch uint64) netip.Prefix {
	base := SyntheticRange.Addr().As4()
	v := binary.BigEndian.Uint32(base[:]) + uint32(epoch%EpochRanges)<<(32-epochBits)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.PrefixFrom(netip.AddrFrom4(b), epochBits)
}

// Mapping ties a synthetic address to a name and its validated real
// addresses.
type Mapping struct {
	// ID is "<epoch hex>-<n>", unique per proxy start.
	ID        string
	Name      string
	Synthetic netip.Addr
	// Real are the validated addresses the transparent listener may
	// dial, at most MaxAddrs.
	Real []netip.Addr
	// Ports are the ports the name is eligible on.
	Ports []int
	// Generation is the policy generation that made the name eligible.
	Generation int64
	Expires    time.Time
}

// Errors of Table.Lookup, for the refusal's reason.
var (
	ErrNoMapping = errors.New("policydns: no mapping for this address")
	ErrExpired   = errors.New("policydns: mapping expired")
	ErrWrongPort = errors.New("policydns: port not eligible for this name")
	ErrFull      = errors.New("policydns: too many live mappings")
	// ErrOtherEpoch: a synthetic address of another boot epoch's range,
	// as a resolver cache kept across a proxy restart would hold.
	ErrOtherEpoch = errors.New("policydns: synthetic address of another boot epoch")
)

// Table is one sandbox's mappings for one boot epoch. Safe for
// concurrent use.
type Table struct {
	epoch  uint64
	prefix netip.Prefix // EpochRange(epoch)
	offset uint32
	ttl    time.Duration
	now    func() time.Time

	mu     sync.Mutex
	next   uint32
	byAddr map[netip.Addr]*Mapping
	byName map[string]*Mapping
}

// CheckTTL reports a mapping lifetime outside MinTTL..MaxTTL, in the
// words the command-line flags use ("want 1s to 30s").
func CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("want %v to %v", MinTTL, MaxTTL)
	}
	return nil
}

// NewTable returns an empty table with a random epoch (a proxy that no
// supervisor numbers the starts of). ttl must be within MinTTL..MaxTTL.
// now is the clock (nil: time.Now).
func NewTable(ttl time.Duration, now func() time.Time) (*Table, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("policydns: epoch: %w", err)
	}
	return NewTableEpoch(binary.LittleEndian.Uint64(b[:]), ttl, now)
}

// NewTableEpoch returns an empty table for boot epoch epoch: its
// addresses come from EpochRange(epoch), starting at a random one.
func NewTableEpoch(epoch uint64, ttl time.Duration, now func() time.Time) (*Table, error) {
	if err := CheckTTL(ttl); err != nil {
		return nil, fmt.Errorf("policydns: TTL %v: %w", ttl, err)
	}
	if now == nil {
		now = time.Now
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("policydns: offset: %w", err)
	}
	return &Table{
		epoch:  epoch,
		prefix: EpochRange(epoch),
		offset: binary.LittleEndian.Uint32(b[:]) % epochSize,
		ttl:    ttl,
		now:    now,
		byAddr: map[netip.Addr]*Mapping{},
		byName: map[string]*Mapping{},
	}, nil
}

// Epoch identifies this table's boot epoch.
func (t *Table) Epoch() uint64 { return t.epoch }

// Range is where this table's addresses come from: EpochRange(Epoch()).
func (t *Table) Range() netip.Prefix { return t.prefix }

// TTL is the lifetime of a mapping and the TTL of its DNS answer.
func (t *Table) TTL() time.Duration { return t.ttl }

// Map returns a live mapping for name with real addresses and ports,
// renewing the name's mapping if it has one (same synthetic address, new
// addresses and expiry) and allocating one otherwise. ErrFull when
// MaxMappings are live.
func (t *Table) Map(name string, real []netip.Addr, ports []int, gen int64) (Mapping, error) {
	if len(real) == 0 {
		return Mapping{}, fmt.Errorf("policydns: %s: no real address", name)
	}
	real = slices.Clone(real[:min(len(real), MaxAddrs)])
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.byName[name]; ok && now.Before(m.Expires) {
		m.Real, m.Ports, m.Generation, m.Expires = real, slices.Clone(ports), gen, now.Add(t.ttl)
		return t.copyOf(m), nil
	}
	if len(t.byAddr) >= MaxMappings {
		t.purge(now, t.ttl)
		if len(t.byAddr) >= MaxMappings {
			t.purge(now, 0) // make room from the expired, never the live
		}
		if len(t.byAddr) >= MaxMappings {
			return Mapping{}, ErrFull
		}
	}
	var addr netip.Addr
	for {
		n := (t.offset + t.next) % epochSize
		t.next++
		addr = t.synthetic(n)
		if _, used := t.byAddr[addr]; !used {
			break
		}
	}
	if old, ok := t.byName[name]; ok {
		delete(t.byAddr, old.Synthetic) // expired: its address is retired
	}
	m := &Mapping{
		ID:         fmt.Sprintf("%016x-%d", t.epoch, t.next),
		Name:       name,
		Synthetic:  addr,
		Real:       real,
		Ports:      slices.Clone(ports),
		Generation: gen,
		Expires:    now.Add(t.ttl),
	}
	t.byAddr[addr] = m
	t.byName[name] = m
	return t.copyOf(m), nil
}

// purge drops mappings expired for longer than keep (expired ones are
// normally kept a TTL long so a late connection is refused as expired,
// not as unknown).
func (t *Table) purge(now time.Time, keep time.Duration) {
	for a, m := range t.byAddr {
		if now.Sub(m.Expires) >= keep {
			delete(t.byAddr, a)
			if t.byName[m.Name] == m {
				delete(t.byName, m.Name)
			}
		}
	}
}

// Lookup returns the mapping of a connection to dst (a synthetic address
// and port): ErrOtherEpoch when the address is outside this epoch's
// range, ErrNoMapping when it was never handed out in this epoch,
// ErrExpired after its TTL, ErrWrongPort when the name is not eligible on
// the port. The mapping comes back with the last two, for the refusal's
// event.
func (t *Table) Lookup(dst netip.AddrPort) (Mapping, error) {
	a := dst.Addr().Unmap()
	if !t.prefix.Contains(a) {
		return Mapping{}, ErrOtherEpoch
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.byAddr[a]
	if !ok {
		return Mapping{}, ErrNoMapping
	}
	c := t.copyOf(m)
	if !now.Before(m.Expires) {
		return c, ErrExpired
	}
	if !slices.Contains(m.Ports, int(dst.Port())) {
		return c, ErrWrongPort
	}
	return c, nil
}

// Live counts mappings not yet expired.
func (t *Table) Live() int {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, m := range t.byAddr {
		if now.Before(m.Expires) {
			n++
		}
	}
	return n
}

func (t *Table) copyOf(m *Mapping) Mapping {
	c := *m
	c.Real, c.Ports = slices.Clone(m.Real), slices.Clone(m.Ports)
	return c
}

// synthetic is the n-th usable address of the table's range (n <
// epochSize).
func (t *Table) synthetic(n uint32) netip.Addr {
	base := t.prefix.Addr().As4()
	v := binary.BigEndian.Uint32(base[:]) + 1 + n
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}
