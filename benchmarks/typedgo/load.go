package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// loadReport is what load prints, as one JSON object.
type loadReport struct {
	Calls          int       `json:"calls"`
	Seconds        float64   `json:"seconds"`
	Milliseconds   []float64 `json:"milliseconds"`
	Errors         int       `json:"errors"`
	FatalResults   int       `json:"fatalResults"`
	FirstError     string    `json:"firstError,omitempty"`
	ResponseBytes  int       `json:"responseBytes"`
	DesiredObjects int       `json:"desiredObjects"`
}

// load sends calls RunFunction calls, inFlight at a time over one connection (as Crossplane holds
// one per function pod), cycling through the requests in a file of length-prefixed (uint32, big
// endian) serialized RunFunctionRequests, and prints each call's latency. A client in Go that
// sends the requests' bytes as they are and reads of each answer only its results and the number
// of desired resources, so that its own cost is small and the same for every server it measures.
func load(args []string) error {
	flags := flag.NewFlagSet("load", flag.ExitOnError)
	address := flags.String("address", "", "the function's gRPC address")
	requests := flags.String("requests", "", "file of length-prefixed RunFunctionRequests")
	calls := flags.Int("calls", 100, "calls to time")
	inFlight := flags.Int("in-flight", 8, "calls under way at once")
	warmup := flags.Int("warmup", 0, "calls made first, one by one, and not timed")
	timeout := flags.Duration("timeout", 2*time.Minute, "each call's deadline")
	_ = flags.Parse(args)

	reqs, err := readRequests(*requests)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(*address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return err
	}
	defer conn.Close() //nolint:errcheck // Closing at exit.

	report := loadReport{Calls: *calls, Milliseconds: make([]float64, 0, *calls)}
	var mu sync.Mutex
	call := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		start := time.Now()
		var rsp []byte
		err := conn.Invoke(ctx, method, &reqs[i%len(reqs)], &rsp)
		elapsed := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		report.Milliseconds = append(report.Milliseconds, float64(elapsed.Microseconds())/1000)
		if err != nil {
			report.Errors++
			if report.FirstError == "" {
				report.FirstError = err.Error()
			}
			return
		}
		fatal, message, desired, err := summary(rsp)
		if err != nil {
			fatal, message = 1, err.Error()
		}
		report.FatalResults += fatal
		if fatal > 0 && report.FirstError == "" {
			report.FirstError = message
		}
		report.ResponseBytes = len(rsp)
		report.DesiredObjects = desired
	}
	for i := range *warmup {
		call(i)
	}
	report.Milliseconds = report.Milliseconds[:0]
	report.Errors, report.FatalResults, report.FirstError = 0, 0, ""

	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range *inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				call(i)
			}
		}()
	}
	for i := range *calls {
		next <- *warmup + i
	}
	close(next)
	wg.Wait()
	report.Seconds = time.Since(start).Seconds()
	sort.Float64s(report.Milliseconds)
	return json.NewEncoder(os.Stdout).Encode(report)
}

const method = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"

// rawCodec sends and receives messages as the bytes they are: the requests were serialized once,
// by the benchmark, and an answer is read only as far as summary reads it.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil } //nolint:forcetypeassert // Only load calls it.

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...) //nolint:forcetypeassert // Only load calls it.
	return nil
}

func (rawCodec) Name() string { return "proto" }

// The field numbers summary reads, from run_function.proto.
const (
	responseDesired = 2
	responseResults = 3
	stateResources  = 2
	resultSeverity  = 1
	resultMessage   = 2
	severityFatal   = int(fnv1.Severity_SEVERITY_FATAL)
	wireTypeBytes   = protowire.BytesType
	wireTypeVarint  = protowire.VarintType
)

// summary reads a serialized RunFunctionResponse's fatal results (how many, the first one's
// message) and its number of desired resources, skipping over everything else.
func summary(rsp []byte) (fatal int, message string, desired int, err error) {
	err = fields(rsp, func(number protowire.Number, typ protowire.Type, value []byte, varint uint64) error {
		switch {
		case number == responseDesired && typ == wireTypeBytes:
			return fields(value, func(n protowire.Number, t protowire.Type, _ []byte, _ uint64) error {
				if n == stateResources && t == wireTypeBytes {
					desired++
				}
				return nil
			})
		case number == responseResults && typ == wireTypeBytes:
			var severity int
			var text string
			if err := fields(value, func(n protowire.Number, t protowire.Type, v []byte, u uint64) error {
				switch {
				case n == resultSeverity && t == wireTypeVarint:
					severity = int(u)
				case n == resultMessage && t == wireTypeBytes:
					text = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			if severity == severityFatal {
				if fatal == 0 {
					message = text
				}
				fatal++
			}
		}
		return nil
	})
	return fatal, message, desired, err
}

// fields calls each for every top-level field of a serialized message: its bytes if length
// delimited, its value if a varint.
func fields(message []byte, each func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(message) > 0 {
		number, typ, n := protowire.ConsumeTag(message)
		if n < 0 {
			return protowire.ParseError(n)
		}
		message = message[n:]
		var value []byte
		var varint uint64
		switch typ {
		case protowire.BytesType:
			value, n = protowire.ConsumeBytes(message)
		case protowire.VarintType:
			varint, n = protowire.ConsumeVarint(message)
		default:
			n = protowire.ConsumeFieldValue(number, typ, message)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		message = message[n:]
		if err := each(number, typ, value, varint); err != nil {
			return err
		}
	}
	return nil
}

func readRequests(path string) ([][]byte, error) {
	f, err := os.Open(path) //nolint:gosec // The benchmark names its own file.
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // Read only.
	r := bufio.NewReader(f)
	var reqs [][]byte
	for {
		var size uint32
		if err := binary.Read(r, binary.BigEndian, &size); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		raw := make([]byte, size)
		if _, err := io.ReadFull(r, raw); err != nil {
			return nil, err
		}
		// Checked once here, sent as they are.
		if err := proto.Unmarshal(raw, &fnv1.RunFunctionRequest{}); err != nil {
			return nil, err
		}
		reqs = append(reqs, raw)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no requests in %s", path)
	}
	return reqs, nil
}
