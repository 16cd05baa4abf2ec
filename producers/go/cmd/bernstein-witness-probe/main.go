// Command bernstein-witness-probe submits a log's signed checkpoint to a C2SP tlog-witness through an
// independent reference client, and checks the witness's cosignatures with Go's note verifier.
//
// The client is sigsum.org/sigsum-go/pkg/client (Client.AddCheckpoint: the one a Sigsum log uses to
// collect cosignatures, https://c2sp.org/tlog-witness); the request and the checkpoint are that
// package's types, so the witness is spoken to by code that shares nothing with bernstein's. Each
// cosignature/v1 line it returns is added to the checkpoint note and opened with
// golang.org/x/mod/sumdb/note and the cosignature/v1 verifier of github.com/transparency-dev/formats
// for the witness vkey on the command line, and checked again by sigsum-go's own cosignature check.
// sigsum-go's checkpoint type takes what a bernstein log signs: one Ed25519 signature under the
// origin's name and no extension lines.
//
//	bernstein-witness-probe -witness URL -witness-vkey VKEY -checkpoint NOTE [-old N] [-leaves FILE | -proof FILE]
//
// -leaves is the log's leaf hashes (base64, one a line, at least the checkpoint's size): the
// consistency proof from the old size is computed from them, and a 409 naming another size is
// answered once more with the proof from that size, as a log does. -proof is a consistency proof
// (base64 hashes, one a line) sent as given. One JSON line is printed; the exit status is 0 only
// when every returned cosignature verifies and the witness's key is among them, 1 when the witness
// refused or a cosignature did not verify, 2 for bad usage or input.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	f_note "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"sigsum.org/sigsum-go/pkg/api"
	"sigsum.org/sigsum-go/pkg/checkpoint"
	"sigsum.org/sigsum-go/pkg/client"
	"sigsum.org/sigsum-go/pkg/crypto"
	"sigsum.org/sigsum-go/pkg/requests"
	"sigsum.org/sigsum-go/pkg/types"
)

// Result is the one JSON line the probe prints.
type Result struct {
	OK           bool     `json:"ok"`
	Origin       string   `json:"origin,omitempty"`
	Size         uint64   `json:"size"`
	Old          uint64   `json:"old"`
	Attempts     int      `json:"attempts"`
	Status       int      `json:"status"`
	WitnessSize  *uint64  `json:"witness_size,omitempty"`
	Cosignatures []string `json:"cosignatures,omitempty"`
	Verified     []string `json:"verified,omitempty"`
	Timestamps   []uint64 `json:"timestamps,omitempty"`
	Cosigned     string   `json:"cosigned,omitempty"`
	Error        string   `json:"error,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, stdout *os.File) int {
	flags := flag.NewFlagSet("bernstein-witness-probe", flag.ContinueOnError)
	witnessURL := flags.String("witness", "", "the witness's submission prefix (POST <prefix>/add-checkpoint)")
	witnessVkey := flags.String("witness-vkey", "", "the witness's verifier key (cosignature/v1, type 0x04)")
	checkpointFile := flags.String("checkpoint", "", "the log's signed checkpoint note")
	old := flags.Uint64("old", 0, "the size the witness last cosigned (0: none)")
	leavesFile := flags.String("leaves", "", "the log's leaf hashes, base64, one a line")
	proofFile := flags.String("proof", "", "a consistency proof from -old, base64 hashes, one a line")
	timeout := flags.Duration("timeout", 10*time.Second, "the whole submission's time limit")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	res := Result{Old: *old}
	fail := func(code int, err error) int {
		res.Error = err.Error()
		emit(stdout, res)
		return code
	}
	if *witnessURL == "" || *witnessVkey == "" || *checkpointFile == "" || flags.NArg() != 0 {
		return fail(2, errors.New("-witness, -witness-vkey and -checkpoint are required, and nothing else"))
	}
	if *leavesFile != "" && *proofFile != "" {
		return fail(2, errors.New("-leaves or -proof, not both"))
	}
	verifier, err := f_note.NewVerifierForCosignatureV1(*witnessVkey)
	if err != nil {
		return fail(2, fmt.Errorf("-witness-vkey: %w", err))
	}
	witnessKey, ok := ed25519Key(*witnessVkey)
	if !ok {
		return fail(2, errors.New("-witness-vkey: not a cosignature/v1 (type 0x04) Ed25519 verifier key"))
	}
	signed, err := os.ReadFile(*checkpointFile)
	if err != nil {
		return fail(2, err)
	}
	var cp checkpoint.Checkpoint
	if err := cp.FromASCII(bytes.NewReader(signed)); err != nil {
		return fail(2, fmt.Errorf("-checkpoint: %w", err))
	}
	res.Origin, res.Size = cp.Origin, cp.TreeHead.Size

	var leaves []tlog.Hash
	var given []crypto.Hash
	switch {
	case *leavesFile != "":
		if leaves, err = readHashes(*leavesFile); err != nil {
			return fail(2, fmt.Errorf("-leaves: %w", err))
		}
		if uint64(len(leaves)) < cp.TreeHead.Size {
			return fail(2, fmt.Errorf("-leaves: %d hashes, the checkpoint's size is %d", len(leaves), cp.TreeHead.Size))
		}
		leaves = leaves[:cp.TreeHead.Size]
	case *proofFile != "":
		hashes, err := readHashes(*proofFile)
		if err != nil {
			return fail(2, fmt.Errorf("-proof: %w", err))
		}
		for _, h := range hashes {
			given = append(given, crypto.Hash(h))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cli := client.New(client.Config{
		URL:        strings.TrimSuffix(*witnessURL, "/"),
		UserAgent:  "bernstein-witness-probe (sigsum-go client)",
		HTTPClient: &http.Client{Timeout: *timeout},
	})
	var lines []checkpoint.CosignatureLine
	for {
		res.Attempts++
		req := requests.AddCheckpoint{OldSize: res.Old, Checkpoint: cp}
		if leaves != nil {
			if req.Proof, err = consistencyProof(leaves, res.Old); err != nil {
				return fail(2, err)
			}
		} else {
			req.Proof.Path = given
		}
		lines, err = cli.AddCheckpoint(ctx, req)
		if err == nil {
			res.Status = http.StatusOK
			break
		}
		res.Status = api.ErrorStatusCode(err)
		if size, ok := api.ErrorConflictOldSize(err); ok {
			res.WitnessSize = &size
			// A log answers a 409 naming another size with the proof from that size, once.
			if leaves != nil && res.Attempts == 1 && size != res.Old && size <= cp.TreeHead.Size {
				res.Old = size
				continue
			}
		}
		return fail(1, fmt.Errorf("the witness refused: %w", err))
	}
	if len(lines) == 0 {
		return fail(1, errors.New("the witness answered 200 without a cosignature line"))
	}

	// The cosignature lines added to the log's note, opened by Go's note verifier: every line whose
	// key is the witness's must verify, and at least one must be there.
	var cosigned bytes.Buffer
	cosigned.Write(bytes.TrimSuffix(signed, []byte("\n")))
	cosigned.WriteString("\n")
	for _, line := range lines {
		var b bytes.Buffer
		if err := line.ToASCII(&b); err != nil {
			return fail(1, err)
		}
		res.Cosignatures = append(res.Cosignatures, strings.TrimSuffix(b.String(), "\n"))
		res.Timestamps = append(res.Timestamps, line.Timestamp)
		cosigned.Write(b.Bytes())
	}
	res.Cosigned = cosigned.String()
	opened, err := note.Open(cosigned.Bytes(), note.VerifierList(verifier))
	if err != nil {
		return fail(1, fmt.Errorf("Go's note verifier rejects the cosigned checkpoint: %w", err))
	}
	for _, sig := range opened.Sigs {
		res.Verified = append(res.Verified, fmt.Sprintf("%s+%08x", sig.Name, sig.Hash))
	}
	// The same through the reference client's own cosignature check (its key from the vkey).
	if _, err := cp.VerifyCosignatureByKey(lines, &witnessKey); err != nil {
		return fail(1, fmt.Errorf("sigsum-go's cosignature check: %w", err))
	}
	res.OK = true
	emit(stdout, res)
	return 0
}

// consistencyProof is the RFC 6962 consistency proof from size old to len(leaves), by x/mod's tlog
// over the leaf hashes (empty from 0 or at the same size, as tlog-witness wants).
func consistencyProof(leaves []tlog.Hash, old uint64) (types.ConsistencyProof, error) {
	n := int64(len(leaves))
	if old == 0 || int64(old) >= n {
		return types.ConsistencyProof{}, nil
	}
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			if x < 0 || x >= int64(len(stored)) {
				return nil, fmt.Errorf("no stored hash %d", x)
			}
			out[i] = stored[x]
		}
		return out, nil
	})
	for i, leaf := range leaves {
		more, err := tlog.StoredHashesForRecordHash(int64(i), leaf, reader)
		if err != nil {
			return types.ConsistencyProof{}, err
		}
		stored = append(stored, more...)
	}
	proof, err := tlog.ProveTree(n, int64(old), reader)
	if err != nil {
		return types.ConsistencyProof{}, err
	}
	var out types.ConsistencyProof
	for _, h := range proof {
		out.Path = append(out.Path, crypto.Hash(h))
	}
	return out, nil
}

func readHashes(path string) ([]tlog.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tlog.Hash
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(raw) != tlog.HashSize {
			return nil, fmt.Errorf("line %d is not the base64 of a %d-byte hash", n, tlog.HashSize)
		}
		out = append(out, tlog.Hash(raw))
	}
	return out, scanner.Err()
}

// ed25519Key is the Ed25519 public key of a cosignature/v1 vkey (name+hash+base64(0x04 || key)).
func ed25519Key(vkey string) (crypto.PublicKey, bool) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return crypto.PublicKey{}, false
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+crypto.PublicKeySize || raw[0] != 0x04 {
		return crypto.PublicKey{}, false
	}
	return crypto.PublicKey(raw[1:]), true
}

func emit(stdout *os.File, res Result) {
	line, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(line))
}
