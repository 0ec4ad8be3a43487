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
// endian) serialized RunFunctionRequests, and prints each call's latency. A client in Go, so that
// the client's own cost is small and the same for every server it measures.
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
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer conn.Close() //nolint:errcheck // Closing at exit.
	client := fnv1.NewFunctionRunnerServiceClient(conn)

	report := loadReport{Calls: *calls, Milliseconds: make([]float64, 0, *calls)}
	var mu sync.Mutex
	call := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		start := time.Now()
		rsp, err := client.RunFunction(ctx, reqs[i%len(reqs)])
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
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				report.FatalResults++
				if report.FirstError == "" {
					report.FirstError = r.GetMessage()
				}
			}
		}
		report.ResponseBytes = proto.Size(rsp)
		report.DesiredObjects = len(rsp.GetDesired().GetResources())
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

func readRequests(path string) ([]*fnv1.RunFunctionRequest, error) {
	f, err := os.Open(path) //nolint:gosec // The benchmark names its own file.
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // Read only.
	r := bufio.NewReader(f)
	var reqs []*fnv1.RunFunctionRequest
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
		req := &fnv1.RunFunctionRequest{}
		if err := proto.Unmarshal(raw, req); err != nil {
			return nil, err
		}
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no requests in %s", path)
	}
	return reqs, nil
}
