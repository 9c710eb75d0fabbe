// Command cri-fake serves upstream's fake CRI runtime and image service
// (k8s.io/cri-client/pkg/fake over the fakes of k8s.io/cri-api/pkg/apis/testing)
// on a unix socket, so a real kubelet can run Pods without images or containers.
//
// Every CreateContainer request is appended, before it is handed to the fake,
// as one JSON line to --record: the Pod (sandbox metadata), the container name
// and the env, devices, mounts and annotations the kubelet assembled — what a
// device plugin's Allocate and a CSI NodePublishVolume gave the container.
// Env values are written as strings (the CRI carries them as bytes).
//
// A container whose env sets CRI_FAKE_EXIT_CODE=<n> exits with that code right
// after it starts, so tests can drive Pods to Succeeded or Failed; every other
// container runs until it is stopped.
//
// Two settings differ from the fake's defaults: images have a non-zero size
// (kubelet refuses size 0) and sandboxes get 127.0.0.1 (the default
// 192.168.192.168 would make kubelet probes dial a private address).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

const exitCodeEnv = "CRI_FAKE_EXIT_CODE"

type keyValue struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type device struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions"`
}

type mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Readonly      bool   `json:"readonly"`
}

type record struct {
	Time         string            `json:"time"`
	SandboxID    string            `json:"sandboxId"`
	PodName      string            `json:"podName"`
	PodNamespace string            `json:"podNamespace"`
	PodUID       string            `json:"podUid"`
	Container    string            `json:"container"`
	Attempt      uint32            `json:"attempt"`
	Env          []keyValue        `json:"env"`
	Devices      []device          `json:"devices"`
	Mounts       []mount           `json:"mounts"`
	Annotations  map[string]string `json:"annotations"`
	Labels       map[string]string `json:"labels"`
	CDIDevices   []string          `json:"cdiDevices"`
}

// recorder is the fake runtime with CreateContainer and StartContainer wrapped.
type recorder struct {
	*fake.RemoteRuntime
	mu   sync.Mutex
	out  *os.File
	exit map[string]int32 // container id -> exit code to take once started
}

func newRecord(req *kubeapi.CreateContainerRequest) record {
	cfg := req.GetConfig()
	meta := req.GetSandboxConfig().GetMetadata()
	r := record{
		Time:         time.Now().UTC().Format(time.RFC3339Nano),
		SandboxID:    req.GetPodSandboxId(),
		PodName:      meta.GetName(),
		PodNamespace: meta.GetNamespace(),
		PodUID:       meta.GetUid(),
		Container:    cfg.GetMetadata().GetName(),
		Attempt:      cfg.GetMetadata().GetAttempt(),
		Env:          []keyValue{},
		Devices:      []device{},
		Mounts:       []mount{},
		Annotations:  cfg.GetAnnotations(),
		Labels:       cfg.GetLabels(),
		CDIDevices:   []string{},
	}
	for _, kv := range cfg.GetEnvs() {
		r.Env = append(r.Env, keyValue{Key: kv.GetKey(), Value: string(kv.GetValue())})
	}
	for _, d := range cfg.GetDevices() {
		r.Devices = append(r.Devices, device{d.GetContainerPath(), d.GetHostPath(), d.GetPermissions()})
	}
	for _, m := range cfg.GetMounts() {
		r.Mounts = append(r.Mounts, mount{m.GetContainerPath(), m.GetHostPath(), m.GetReadonly()})
	}
	for _, c := range cfg.GetCDIDevices() {
		r.CDIDevices = append(r.CDIDevices, c.GetName())
	}
	return r
}

func (r *recorder) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	rec := newRecord(req)
	line, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("cri-fake: encoding the record: %w", err)
	}
	r.mu.Lock()
	_, err = r.out.Write(append(line, '\n'))
	r.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cri-fake: writing the record: %w", err)
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	// A real runtime reports the log file it writes: the sandbox's log directory joined with the
	// container's log path. Upstream's fake leaves it empty, and the kubelet then cleans a removed
	// container's logs by globbing "*" in its working directory.
	if dir, rel := req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath(); dir != "" && rel != "" {
		svc := r.RuntimeService
		svc.Lock()
		if c, ok := svc.Containers[resp.GetContainerId()]; ok {
			c.LogPath = filepath.Join(dir, rel)
		}
		svc.Unlock()
	}
	for _, kv := range rec.Env {
		if kv.Key == exitCodeEnv {
			code, convErr := strconv.ParseInt(strings.TrimSpace(kv.Value), 10, 32)
			if convErr == nil {
				r.mu.Lock()
				r.exit[resp.GetContainerId()] = int32(code)
				r.mu.Unlock()
			}
		}
	}
	return resp, nil
}

func (r *recorder) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	code, exits := r.exit[req.GetContainerId()]
	r.mu.Unlock()
	if exits {
		svc := r.RuntimeService
		svc.Lock()
		if c, ok := svc.Containers[req.GetContainerId()]; ok {
			c.State = kubeapi.ContainerState_CONTAINER_EXITED
			c.FinishedAt = time.Now().UnixNano()
			c.ExitCode = code
			if code == 0 {
				c.Reason = "Completed"
			} else {
				c.Reason = "Error"
			}
		}
		svc.Unlock()
	}
	return resp, nil
}

func main() {
	endpoint := flag.String("endpoint", "", "unix:///path/to/cri.sock to serve on")
	recordPath := flag.String("record", "", "file to append one JSON line per CreateContainer to")
	flag.Parse()
	if *endpoint == "" || *recordPath == "" {
		fmt.Fprintln(os.Stderr, "usage: cri-fake --endpoint unix:///path/cri.sock --record containers.jsonl")
		os.Exit(2)
	}
	out, err := os.OpenFile(*recordPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-fake: %v\n", err)
		os.Exit(1)
	}
	defer out.Close()

	apitest.FakePodSandboxIPs = []string{"127.0.0.1"}
	runtime := fake.NewFakeRemoteRuntime()
	runtime.ImageService.SetFakeImageSize(1 << 20)
	runtime.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{
		Conditions: []*kubeapi.RuntimeCondition{
			{Type: kubeapi.RuntimeReady, Status: true},
			{Type: kubeapi.NetworkReady, Status: true},
		},
	}
	rec := &recorder{RemoteRuntime: runtime, out: out, exit: map[string]int32{}}

	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, rec)
	kubeapi.RegisterImageServiceServer(server, rec)
	listener, err := util.CreateListener(*endpoint)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-fake: listening on %s: %v\n", *endpoint, err)
		os.Exit(1)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		server.GracefulStop()
	}()
	fmt.Fprintf(os.Stderr, "cri-fake: serving %s, recording to %s\n", *endpoint, *recordPath)
	if err := server.Serve(listener); err != nil {
		fmt.Fprintf(os.Stderr, "cri-fake: %v\n", err)
		os.Exit(1)
	}
}
