package conformance

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	bernstein "github.com/bernstein-journal/bernstein/producers/go"
)

// runPartitions reproduces schemas/vectors/partitions.json (the run-id partitioner: docs/producing.md,
// "The partitioner"): murmur2 of each key, its partition for every stated partition count by the
// SDK's PartitionFor, and by franz-go's default partitioner as the SDK's producer is configured (so
// the producer itself is proven, not just a copy).
func runPartitions(r *Runner, doc obj) {
	r.same("partitions/seed", doc.str("seed"), "0x9747b28c")
	if algorithm := doc.str("algorithm"); !strings.Contains(algorithm, "murmur2") || !strings.Contains(algorithm, "& 0x7fffffff) % partitions") {
		r.miss("partitions/algorithm", "not the rule the SDK implements: %q", algorithm)
	} else {
		r.pass("partitions/algorithm")
	}
	for i, c := range doc.objs("cases") {
		c.onlyKeys("key_utf8", "key_hex", "murmur2", "partitions")
		name := fmt.Sprintf("partitions/cases[%d]", i)
		key := c.hex("key_hex")
		if c.has("key_utf8") {
			r.same(name+"/key_utf8", hex.EncodeToString([]byte(c.str("key_utf8"))), hex.EncodeToString(key))
		}
		r.same(name+"/murmur2", strconv.FormatInt(int64(bernstein.Murmur2(key)), 10), strconv.FormatInt(c.int("murmur2"), 10))
		parts := c.obj("partitions")
		counts := make([]string, 0, len(parts.m))
		for n := range parts.m {
			counts = append(counts, n)
		}
		slices.Sort(counts)
		for _, n := range counts {
			total, err := strconv.Atoi(n)
			if err != nil || total < 1 {
				r.miss(name+"/partitions/"+n, "not a partition count")
				continue
			}
			want := strconv.FormatInt(parts.int(n), 10)
			r.same(fmt.Sprintf("%s/partitions/%d", name, total), strconv.Itoa(bernstein.PartitionFor(key, total)), want)
			r.same(fmt.Sprintf("%s/partitions/%d/franz-go", name, total), strconv.Itoa(franzPartition(key, total)), want)
		}
	}
}

// franzPartition is the partition the SDK's producer (franz-go, FranzPartitioner) picks for a keyed
// record, -1 if the partitioner would not keep a keyed record on its partition when that partition
// is unavailable (RequiresConsistency: a run must never move).
func franzPartition(key []byte, n int) int {
	tp := bernstein.FranzPartitioner().ForTopic("t")
	record := &kgo.Record{Key: key}
	if !tp.RequiresConsistency(record) {
		return -1
	}
	if b, ok := tp.(kgo.TopicBackupPartitioner); ok {
		return b.PartitionByBackup(record, n, nil)
	}
	return tp.Partition(record, n)
}
