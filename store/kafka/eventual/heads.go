package eventual

import "sync"

// DefaultKnownHeads is how many heads a Heads remembers unless told
// otherwise: some 150 bytes each besides the id's string.
const DefaultKnownHeads = 100_000

// Heads remembers the heads a replicator read or wrote, so that the next
// poll of the same key does not read its head again. It holds, per topic,
// partition and id, the head as the store has it after the replicator's
// last successful write or read of it, or that the key has none (never
// written, or purged).
//
// A head changes only through the replicator that applies its key's
// partition (deletes and purges, like appends, go through the log; no
// other writer of this library or of the Scala one writes heads), and a
// consumer group gives each partition to one member at a time. What a
// Heads knows therefore stays true while its replicator keeps the
// partition: the replicator forgets a partition's heads (Forget) whenever
// the partition is assigned, revoked or lost (another member may have
// applied it meanwhile), a new replicator starts with none, and
// [ReplicateKnown] forgets the partition's heads after any failed write,
// whose outcome it cannot know. A rebalance that waits on a poll being
// applied may give the poll's partitions to another member before the
// poll is done (the member is kicked from the group when it applies the
// poll for longer than the rebalance timeout, e.g. while retrying a
// failing store): the replicator then calls [Heads.Suspend], so that the
// rest of the poll reads its heads from the store (where the new owner's
// writes are) as without a Heads, until [Heads.Resume] once the member's
// partitions are assigned again. Two replicators applying the same
// partition at once (different consumer groups into one keyspace) break
// that assumption, as they break the order of each key's writes without
// it.
//
// At most max heads are kept; beyond it, an arbitrary one is forgotten for
// each new one, whose next poll reads it again. It is safe for concurrent
// use.
type Heads struct {
	mu        sync.Mutex
	max       int
	known     map[headsKey]knownHead
	suspended bool  // Suspend called, Resume not yet
	reads     int64 // heads read from the store (misses), for tests
}

type headsKey struct {
	topic     string
	partition int32
	id        string
}

// knownHead is a key's head as the store holds it; has is false when it
// holds none.
type knownHead struct {
	head Head
	has  bool
}

// NewHeads returns a Heads of at most max entries (max ≤ 0: remembers
// nothing, every poll reads its keys' heads).
func NewHeads(max int) *Heads {
	return &Heads{max: max, known: map[headsKey]knownHead{}}
}

// get returns what is known of key's head in partition.
func (h *Heads) get(key Key, partition int32) (knownHead, bool) {
	if h == nil {
		return knownHead{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.known[headsKey{key.Topic, partition, key.ID}]
	return k, ok
}

// put records key's head in partition as the store now holds it.
func (h *Heads) put(key Key, partition int32, k knownHead) {
	if h == nil || h.max <= 0 {
		return
	}
	hk := headsKey{key.Topic, partition, key.ID}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.suspended {
		return
	}
	if _, ok := h.known[hk]; !ok && len(h.known) >= h.max {
		for other := range h.known {
			delete(h.known, other)
			break
		}
	}
	h.known[hk] = k
}

// read counts a head read from the store.
func (h *Heads) read() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.reads++
	h.mu.Unlock()
}

// Forget drops every head known in a topic's partition.
func (h *Heads) Forget(topic string, partition int32) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.known {
		if k.topic == topic && k.partition == partition {
			delete(h.known, k)
		}
	}
}

// Suspend forgets every head and remembers none until Resume: the heads
// a poll being applied reads or writes from then on are not kept. A
// replicator calls it when a rebalance waits on its poll, after which the
// poll's partitions may belong to another member before the poll is done.
func (h *Heads) Suspend() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.suspended = true
	clear(h.known)
}

// Resume makes h remember heads again after Suspend. A replicator calls it
// when its partitions are assigned, with no poll being applied.
func (h *Heads) Resume() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.suspended = false
}

// Len returns how many heads are known.
func (h *Heads) Len() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.known)
}

// Reads returns how many heads were read from the store because they were
// not known (the misses).
func (h *Heads) Reads() int64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads
}
