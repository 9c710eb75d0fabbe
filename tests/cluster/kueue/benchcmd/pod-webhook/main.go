// Command pod-webhook calls Kueue's own Pod webhooks in process, the way its webhook server calls
// them, minus the HTTP server and TLS: the handlers are set up by Kueue's pod.SetupWebhook on a
// controller-runtime manager with the options Kueue's main passes for the chart's configuration
// (manageJobsWithoutQueueName false, the managedJobsNamespaceSelector, the feature gates), and
// each AdmissionReview body goes through controller-runtime's admission handler (decode the review
// and the Pod, decide, encode the answer and, for the mutating one, its JSON patch) over the
// webhook server's own mux.
//
// Namespaces are read as the manager's cache reads them (a map lookup and a deep copy); any other
// object is not found, as in a cache without it (no default WorkloadPriorityClass).
//
//	pod-webhook -path /validate--v1-pod -seconds 3 -namespace bench body.json...
//
// Prints one JSON line: reviews answered, CPU seconds of this process (every thread: the garbage
// collector's share is the handler's cost too), wall seconds, and how the answers read.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/controller/jobs/pod"
)

// cached answers Get as the manager's informer cache does for the objects it holds.
type cached struct {
	client.Client
	namespaces map[string]*corev1.Namespace
}

func (c cached) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if out, ok := obj.(*corev1.Namespace); ok {
		if ns, found := c.namespaces[key.Name]; found {
			ns.DeepCopyInto(out)
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

type answer struct {
	Response struct {
		Allowed bool   `json:"allowed"`
		Patch   []byte `json:"patch"`
		Result  *struct {
			Code int32 `json:"code"`
		} `json:"result"`
	} `json:"response"`
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		panic(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pod-webhook: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	path := flag.String("path", "/validate--v1-pod", "the webhook's path on Kueue's server")
	seconds := flag.Float64("seconds", 3, "how long to call it")
	namespace := flag.String("namespace", "bench", "the namespace the reviews' Pods are in (it exists)")
	flag.Parse()
	if flag.NArg() == 0 {
		fail("no AdmissionReview bodies given")
	}
	bodies := make([][]byte, 0, flag.NArg())
	for _, name := range flag.Args() {
		body, err := os.ReadFile(name)
		if err != nil {
			fail("%v", err)
		}
		bodies = append(bodies, body)
	}

	ctrl.SetLogger(zap.New()) // Kueue's main logs through zap at its default level
	// The chart's Kueue configuration (charts/gpustack-operator/values.yaml).
	gates := map[string]bool{"TopologyAwareScheduling": true, "TASBalancedPlacement": true, "TASRespectNodeAffinityPreferred": true}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		fail("feature gates: %v", err)
	}
	selector, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
			Values: []string{"kube-system", "kueue-system", "gpustack-system"},
		}},
	})
	if err != nil {
		fail("%v", err)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fail("%v", err)
	}
	reader := cached{namespaces: map[string]*corev1.Namespace{*namespace: {
		ObjectMeta: metav1.ObjectMeta{Name: *namespace, Labels: map[string]string{"kubernetes.io/metadata.name": *namespace}},
	}}}
	// The manager is never started: nothing here dials the (absent) apiserver.
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{}),
		NewClient: func(*rest.Config, client.Options) (client.Client, error) {
			return reader, nil
		},
	})
	if err != nil {
		fail("manager: %v", err)
	}
	if err := pod.SetupWebhook(mgr,
		jobframework.WithManageJobsWithoutQueueName(false),
		jobframework.WithManagedJobsNamespaceSelector(selector),
		jobframework.WithQueues(qcache.NewManager(reader, nil, qcache.NewRequeuer())),
	); err != nil {
		fail("pod.SetupWebhook: %v", err)
	}
	mux := mgr.GetWebhookServer().(*webhook.DefaultServer).WebhookMux()

	serve := func(body []byte) *httptest.ResponseRecorder {
		request := httptest.NewRequest(http.MethodPost, *path, bytes.NewReader(body))
		request.Header.Set("Content-Type", "application/json")
		recorder := httptest.NewRecorder()
		mux.ServeHTTP(recorder, request)
		return recorder
	}
	call := func(body []byte) answer {
		recorder := serve(body)
		if recorder.Code != http.StatusOK {
			fail("%s answered HTTP %d: %s", *path, recorder.Code, recorder.Body.String())
		}
		var out answer
		if err := json.Unmarshal(recorder.Body.Bytes(), &out); err != nil {
			fail("%s: the answer does not read as an AdmissionReview: %v", *path, err)
		}
		return out
	}
	// Each body once, for how the answers read (and to warm up), then as many rounds as fit.
	allowed, patched := 0, 0
	for _, body := range bodies {
		out := call(body)
		if out.Response.Allowed {
			allowed++
		}
		if len(out.Response.Patch) > 0 {
			patched++
		}
	}
	reviews := 0
	cpu0, start := cpuSeconds(), time.Now()
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(deadline) {
		for _, body := range bodies {
			serve(body)
		}
		reviews += len(bodies)
	}
	wall, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
	line, _ := json.Marshal(map[string]any{
		"path": *path, "bodies": len(bodies), "allowed": allowed, "patched": patched,
		"reviews": reviews, "cpu_seconds": cpu, "wall_seconds": wall,
		"cpu_us_per_review": 1e6 * cpu / float64(reviews),
	})
	fmt.Println(string(line))
}
