package main

// The near-floor peer of benchmarks/bench_vs_go.py (`typedgo floor`): a function on function-sdk-go
// that composes nothing. It is given, at start, the Python function's own answers to the requests
// the benchmark will send, as the bytes the Python function serves, and answers each request with
// them: what a function costs when composing costs nothing, gRPC and the SDK's server all that is
// left. Only what varies between the benchmark's requests picks an answer: the number of pools and
// the first pool's replicas.

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/crossplane/function-sdk-go"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// answerKey is what varies between the benchmark's requests.
type answerKey struct {
	pools    int
	replicas float64
}

type floor struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	// Each answer as the chunks it is made of: chunks[i] for each i, in order.
	answers map[answerKey][]uint32
	chunks  [][]byte
}

// RunFunction answers with the precomputed bytes: written as the response's unknown fields, which
// protobuf marshals as they are, so the answer is the Python function's, byte for byte.
func (f *floor) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	key, err := keyOf(req)
	if err != nil {
		return nil, err
	}
	parts, ok := f.answers[key]
	if !ok {
		return nil, fmt.Errorf("no answer for %d pools, %v replicas", key.pools, key.replicas)
	}
	size := 0
	for _, i := range parts {
		size += len(f.chunks[i])
	}
	raw := make([]byte, 0, size)
	for _, i := range parts {
		raw = append(raw, f.chunks[i]...)
	}
	rsp := &fnv1.RunFunctionResponse{}
	rsp.ProtoReflect().SetUnknown(raw)
	return rsp, nil
}

// keyOf reads the number of pools and the first pool's replicas from the XR's spec.
func keyOf(req *fnv1.RunFunctionRequest) (answerKey, error) {
	spec := req.GetObserved().GetComposite().GetResource().GetFields()["spec"].GetStructValue()
	pools := spec.GetFields()["supernodes"].GetStructValue().GetFields()["pools"].GetListValue().GetValues()
	if len(pools) == 0 {
		return answerKey{}, fmt.Errorf("no pools in the request")
	}
	replicas := pools[0].GetStructValue().GetFields()["replicas"]
	if _, ok := replicas.GetKind().(*structpb.Value_NumberValue); !ok {
		return answerKey{}, fmt.Errorf("the first pool has no number of replicas")
	}
	return answerKey{len(pools), replicas.GetNumberValue()}, nil
}

// readAnswers reads the file bench_vs_go.py writes, every integer a uint32, big endian: the number
// of chunks, each chunk (its length, its bytes), then the number of answers, each answer (its
// pools, its replicas, its number of chunks, their indexes).
func readAnswers(path string) (*floor, error) {
	file, err := os.Open(path) //nolint:gosec // The benchmark names its own file.
	if err != nil {
		return nil, err
	}
	defer file.Close() //nolint:errcheck // Read only.
	r := bufio.NewReader(file)
	f := &floor{answers: map[answerKey][]uint32{}}
	count, err := readUint32(r)
	for range count {
		size, err := readUint32(r)
		if err != nil {
			return nil, err
		}
		chunk := make([]byte, size)
		if _, err := io.ReadFull(r, chunk); err != nil {
			return nil, err
		}
		f.chunks = append(f.chunks, chunk)
	}
	if err == nil {
		count, err = readUint32(r)
	}
	for range count {
		var fields [3]uint32
		if err := binary.Read(r, binary.BigEndian, &fields); err != nil {
			return nil, err
		}
		parts := make([]uint32, fields[2])
		if err := binary.Read(r, binary.BigEndian, parts); err != nil {
			return nil, err
		}
		for _, i := range parts {
			if int(i) >= len(f.chunks) {
				return nil, fmt.Errorf("%s: chunk %d of %d", path, i, len(f.chunks))
			}
		}
		f.answers[answerKey{int(fields[0]), float64(fields[1])}] = parts
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func readUint32(r io.Reader) (uint32, error) {
	var value uint32
	err := binary.Read(r, binary.BigEndian, &value)
	return value, err
}

func serveFloor(args []string) error {
	flags := flag.NewFlagSet("floor", flag.ExitOnError)
	address := flags.String("address", "127.0.0.1:9443", "where to listen for gRPC")
	answers := flags.String("answers", "", "the answers file bench_vs_go.py writes")
	_ = flags.Parse(args)
	f, err := readAnswers(*answers)
	if err != nil {
		return err
	}
	return function.Serve(f,
		function.Listen("tcp", *address),
		function.Insecure(true),
		// No metrics listener: the benchmark runs several servers on one machine.
		function.WithMetricsServer(""),
	)
}
