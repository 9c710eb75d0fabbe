// Command dm-kubelet plays the kubelet's side of the device-plugin API for
// loadtests/bench_devicemanager.py: what the kubelet's device manager and its
// pod-resources server do, in Go as the kubelet does it, so the benchmark's
// figures are the device plugins' (Python) and not those of a Python stand-in
// competing with them for the machine's two cores.
//
//   - It serves the pod-resources API (v1 List) on <dir>/pr.sock: the Pods it
//     is admitting, without devices, and the ones it admitted, with the device
//     IDs Allocate was called with.
//   - It keeps a ListAndWatch stream open on every plugin socket of -watch, as
//     the kubelet does, and offers the resource's healthy, unallocated devices.
//   - -concurrency callers each admit the next of -pods Pods (oldest first),
//     call GetPreferredAllocation and then Allocate, and time both; with -gap
//     each caller pauses that long after each admission.
//
// The plugins pick the oldest admitted container without devices, so a grant
// is recorded on the oldest admitting Pod (with one caller, the one admitted).
// When every Pod is served it prints one JSON object: the seconds of each
// call, in order, and the refusals.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	dp "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	pr "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type pod struct {
	name    string
	devices []string // nil while it is being admitted
}

type kubelet struct {
	pr.UnimplementedPodResourcesListerServer
	resource  string
	namespace string

	mu        sync.Mutex
	pods      []*pod          // admission order
	admitting []*pod          // oldest first
	allocated map[string]bool // device IDs Allocate was called with
	healthy   []string        // the resource's healthy devices, as last listed
	listed    chan struct{}
	once      sync.Once
}

func (k *kubelet) List(context.Context, *pr.ListPodResourcesRequest) (*pr.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := &pr.ListPodResourcesResponse{PodResources: make([]*pr.PodResources, 0, len(k.pods))}
	for _, p := range k.pods {
		container := &pr.ContainerResources{Name: "main"}
		if p.devices != nil {
			container.Devices = []*pr.ContainerDevices{{ResourceName: k.resource, DeviceIds: p.devices}}
		}
		out.PodResources = append(out.PodResources, &pr.PodResources{
			Name: p.name, Namespace: k.namespace, Containers: []*pr.ContainerResources{container},
		})
	}
	return out, nil
}

func (k *kubelet) admit(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := &pod{name: name}
	k.pods = append(k.pods, p)
	k.admitting = append(k.admitting, p)
}

// available: the healthy devices no grant holds, in the order the plugin listed them.
func (k *kubelet) available() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.healthy))
	for _, id := range k.healthy {
		if !k.allocated[id] {
			out = append(out, id)
		}
	}
	return out
}

func (k *kubelet) granted(ids []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		k.allocated[id] = true
	}
	if len(k.admitting) > 0 {
		k.admitting[0].devices = ids
		k.admitting = k.admitting[1:]
	}
}

func (k *kubelet) refused(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, p := range k.admitting {
		if p.name == name {
			k.admitting = append(k.admitting[:i], k.admitting[i+1:]...)
			break
		}
	}
	for i, p := range k.pods {
		if p.name == name {
			k.pods = append(k.pods[:i], k.pods[i+1:]...)
			break
		}
	}
}

func dial(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// watch reads one plugin's ListAndWatch stream until ctx ends; for the benchmarked resource it
// keeps the healthy devices.
func (k *kubelet) watch(ctx context.Context, path string, mine bool) error {
	conn, err := dial(path)
	if err != nil {
		return err
	}
	stream, err := dp.NewDevicePluginClient(conn).ListAndWatch(ctx, &dp.Empty{})
	if err != nil {
		return err
	}
	go func() {
		defer conn.Close()
		for {
			answer, err := stream.Recv()
			if err != nil {
				return
			}
			if !mine {
				continue
			}
			healthy := make([]string, 0, len(answer.Devices))
			for _, d := range answer.Devices {
				if d.Health == dp.Healthy {
					healthy = append(healthy, d.ID)
				}
			}
			k.mu.Lock()
			k.healthy = healthy
			k.mu.Unlock()
			k.once.Do(func() { close(k.listed) })
		}
	}()
	return nil
}

type result struct {
	Preferred []float64 `json:"preferred_s"`
	Allocate  []float64 `json:"allocate_s"`
	Refusals  []string  `json:"refusals"`
}

func main() {
	dir := flag.String("dir", "", "directory of the plugin sockets; pr.sock is served there")
	resource := flag.String("resource", "", "the resource allocated")
	socket := flag.String("socket", "", "its plugin socket (a name in -dir)")
	watchList := flag.String("watch", "", "every plugin socket to keep a ListAndWatch stream on (comma-separated names)")
	pods := flag.Int("pods", 400, "Pods admitted, one allocation each")
	concurrency := flag.Int("concurrency", 8, "callers at once")
	size := flag.Int("size", 1, "devices per allocation")
	namespace := flag.String("namespace", "bench", "the Pods' namespace")
	prefix := flag.String("prefix", "p", "Pod names are <prefix><index>")
	gap := flag.Duration("gap", 0, "pause of each caller after each admission (a Pod starting before the next)")
	flag.Parse()
	if *dir == "" || *resource == "" || *socket == "" {
		fmt.Fprintln(os.Stderr, "dm-kubelet: -dir, -resource and -socket are required")
		os.Exit(2)
	}

	k := &kubelet{resource: *resource, namespace: *namespace, allocated: map[string]bool{}, listed: make(chan struct{})}
	listener, err := net.Listen("unix", filepath.Join(*dir, "pr.sock"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dm-kubelet:", err)
		os.Exit(1)
	}
	server := grpc.NewServer()
	pr.RegisterPodResourcesListerServer(server, k)
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range strings.Split(*watchList, ",") {
		if name == "" {
			continue
		}
		if err := k.watch(ctx, filepath.Join(*dir, name), name == *socket); err != nil {
			fmt.Fprintln(os.Stderr, "dm-kubelet: watch", name, err)
			os.Exit(1)
		}
	}
	if *watchList == "" || !strings.Contains(","+*watchList+",", ","+*socket+",") {
		if err := k.watch(ctx, filepath.Join(*dir, *socket), true); err != nil {
			fmt.Fprintln(os.Stderr, "dm-kubelet: watch", *socket, err)
			os.Exit(1)
		}
	}
	select {
	case <-k.listed:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "dm-kubelet: no device list from", *socket)
		os.Exit(1)
	}

	conn, err := dial(filepath.Join(*dir, *socket))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dm-kubelet:", err)
		os.Exit(1)
	}
	defer conn.Close()
	plugin := dp.NewDevicePluginClient(conn)

	var mu sync.Mutex
	next := 0
	out := result{Preferred: []float64{}, Allocate: []float64{}, Refusals: []string{}}
	refuse := func(name, call string, err error) { // the kubelet fails the Pod: it is admitted no more
		k.refused(name)
		mu.Lock()
		out.Refusals = append(out.Refusals, call+": "+err.Error())
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := 0; c < *concurrency; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= *pods {
					mu.Unlock()
					return
				}
				name := fmt.Sprintf("%s%d", *prefix, next)
				next++
				k.admit(name) // under the callers' lock: Pods are admitted oldest first
				mu.Unlock()
				available := k.available()
				start := time.Now()
				preferred, err := plugin.GetPreferredAllocation(ctx, &dp.PreferredAllocationRequest{
					ContainerRequests: []*dp.ContainerPreferredAllocationRequest{{
						AvailableDeviceIDs: available, AllocationSize: int32(*size),
					}},
				})
				middle := time.Now()
				if err != nil {
					refuse(name, "GetPreferredAllocation", err)
					continue
				}
				ids := preferred.ContainerResponses[0].DeviceIDs
				_, err = plugin.Allocate(ctx, &dp.AllocateRequest{
					ContainerRequests: []*dp.ContainerAllocateRequest{{DevicesIds: ids}},
				})
				end := time.Now()
				if err != nil {
					refuse(name, "Allocate", err)
					continue
				}
				k.granted(ids)
				mu.Lock()
				out.Preferred = append(out.Preferred, middle.Sub(start).Seconds())
				out.Allocate = append(out.Allocate, end.Sub(middle).Seconds())
				mu.Unlock()
				if *gap > 0 {
					time.Sleep(*gap)
				}
			}
		}()
	}
	wg.Wait()
	sort.Strings(out.Refusals)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "dm-kubelet:", err)
		os.Exit(1)
	}
}
