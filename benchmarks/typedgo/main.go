// Command typedgo is the comparison peer of benchmarks/bench_vs_go.py: a composition function
// written the way a typed Go function on function-sdk-go is written, which composes the
// benchmark's Federations into the same desired state as the Python function.
//
// It reads the XR's spec into Go types, builds each workload from k8s.io/api types, wraps it in a
// provider-kubernetes Object and answers through the SDK's helpers. It knows only what the
// benchmark's Federations use (StatefulSet pools, process isolation, GPUs, node config, a node
// selector, one ProviderConfig and namespace, no observed resources): it measures what composing
// costs in Go, it is not a second implementation of the API. The benchmark checks that its desired
// resources and composite status equal the Python function's before it times anything.
//
// `typedgo floor` (floor.go) is the benchmark's other peer, which composes nothing, and `typedgo
// load` (load.go) the load client that calls them all.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/crossplane/function-sdk-go"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"
	"github.com/crossplane/function-sdk-go/resource"
	"github.com/crossplane/function-sdk-go/resource/composed"
	"github.com/crossplane/function-sdk-go/resource/composite"
	"github.com/crossplane/function-sdk-go/response"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	kresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The spec's fields the benchmark's Federations set.
type federationSpec struct {
	Mode          string         `json:"mode"`
	IsolationMode string         `json:"isolationMode"`
	SuperLink     superLinkSpec  `json:"superlink"`
	SuperNodes    superNodesSpec `json:"supernodes"`
}

type superLinkSpec struct {
	Image          string `json:"image"`
	SuperexecImage string `json:"superexecImage"`
}

type superNodesSpec struct {
	Image string          `json:"image"`
	Env   []corev1.EnvVar `json:"env"`
	Pools []poolSpec      `json:"pools"`
}

type poolSpec struct {
	Name               string                      `json:"name"`
	Replicas           int32                       `json:"replicas"`
	Images             poolImages                  `json:"images"`
	SupernodeResources corev1.ResourceRequirements `json:"supernodeResources"`
	GPU                gpuSpec                     `json:"gpu"`
	NodeConfig         map[string]string           `json:"nodeConfig"`
	PodTemplate        podTemplate                 `json:"podTemplate"`
}

type poolImages struct {
	SuperexecClientApp string `json:"superexecClientApp"`
}

type gpuSpec struct {
	Enabled bool   `json:"enabled"`
	Vendor  string `json:"vendor"`
}

type podTemplate struct {
	Spec struct {
		NodeSelector map[string]string `json:"nodeSelector"`
	} `json:"spec"`
}

const (
	providerConfig = "default"
	fleetPort      = 9092
	controlPort    = 9093
	clientAppPort  = 9094
	uid            = 49999
	// The readiness the Python function gives a workload's Object.
	workloadReady = "has(object.status) && has(object.status.observedGeneration) && " +
		"object.status.observedGeneration == object.metadata.generation && " +
		"(has(object.status.readyReplicas) ? object.status.readyReplicas : 0) == object.spec.replicas && " +
		"(has(object.status.updatedReplicas) ? object.status.updatedReplicas : 0) == object.spec.replicas"
)

type composer struct {
	fnv1.UnimplementedFunctionRunnerServiceServer
}

func (f *composer) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	rsp := response.To(req, time.Minute)
	oxr, err := request.GetObservedCompositeResource(req)
	if err != nil {
		response.Fatal(rsp, fmt.Errorf("cannot read the composite resource: %w", err))
		return rsp, nil
	}
	var spec federationSpec
	if err := oxr.Resource.GetValueInto("spec", &spec); err != nil {
		response.Fatal(rsp, fmt.Errorf("cannot read spec: %w", err))
		return rsp, nil
	}
	instance := oxr.Resource.GetLabels()["crossplane.io/claim-name"]
	namespace := oxr.Resource.GetLabels()["crossplane.io/claim-namespace"]
	if err := compose(rsp, spec, instance, namespace); err != nil {
		response.Fatal(rsp, err)
	}
	return rsp, nil
}

// compose sets the desired resources, the composite's status and its conditions.
func compose(rsp *fnv1.RunFunctionResponse, spec federationSpec, instance, namespace string) error {
	superlinkName := instance + "-superlink"
	superlinkLabels := labels(instance, "superlink", "superlink")
	supernodeSelector := map[string]string{"app.kubernetes.io/instance": instance, "app.kubernetes.io/name": "supernode"}
	fleet := fmt.Sprintf("%s.%s.svc:%d", superlinkName, namespace, fleetPort)

	type desired struct {
		name      resource.Name
		manifest  runtime.Object
		readiness map[string]any
	}
	created := map[string]any{"policy": "SuccessfulCreate"}
	workload := map[string]any{"policy": "DeriveFromCelQuery", "celQuery": workloadReady}
	all := []desired{
		{"superlink", superlinkStatefulSet(spec, superlinkName, namespace, superlinkLabels), workload},
		{"superlink-service", &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: superlinkName, Namespace: namespace, Labels: superlinkLabels},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeClusterIP,
				Selector: superlinkLabels,
				Ports: []corev1.ServicePort{{
					Name: "fleet", Port: fleetPort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(fleetPort),
				}},
			},
		}, created},
		{"superlink-serviceaccount", serviceAccount(superlinkName, namespace, labels(instance, "superlink", "serviceaccount")), created},
		{"networkpolicy-superlink", &networkingv1.NetworkPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: superlinkName, Namespace: namespace, Labels: superlinkLabels},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: superlinkLabels},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: supernodeSelector}}},
					Ports: []networkingv1.NetworkPolicyPort{tcp(fleetPort)},
				}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			},
		}, created},
		{resource.Name("networkpolicy-supernode-" + providerConfig + "-" + namespace), &networkingv1.NetworkPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: instance + "-supernode", Namespace: namespace, Labels: labels(instance, "supernode", "network-policy")},
			Spec: networkingv1.NetworkPolicySpec{
				// The pool namespace's pods: its SuperNodes and, with node authentication, the keys gatherer.
				PodSelector: metav1.LabelSelector{
					MatchLabels: map[string]string{"app.kubernetes.io/instance": instance},
					MatchExpressions: []metav1.LabelSelectorRequirement{{
						Key: "app.kubernetes.io/name", Operator: metav1.LabelSelectorOpIn, Values: []string{"keys-gatherer", "supernode"},
					}},
				},
				Egress: []networkingv1.NetworkPolicyEgressRule{
					{Ports: []networkingv1.NetworkPolicyPort{port(corev1.ProtocolUDP, 53), tcp(53)}},
					{
						Ports: []networkingv1.NetworkPolicyPort{tcp(fleetPort)},
						To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: superlinkLabels}}},
					},
				},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			},
		}, created},
		{resource.Name("serviceaccount-" + providerConfig + "-" + namespace), serviceAccount(instance+"-flower", namespace, labels(instance, "flower", "serviceaccount")), created},
	}
	pools := make([]any, 0, len(spec.SuperNodes.Pools))
	var supernodes int64
	notReady := make([]string, 0, len(spec.SuperNodes.Pools))
	for _, pool := range spec.SuperNodes.Pools {
		all = append(all, desired{resource.Name("pool-" + pool.Name), poolStatefulSet(spec, pool, instance, namespace, fleet), workload})
		pools = append(pools, map[string]any{
			"name": pool.Name, "kind": "StatefulSet", "namespace": namespace, "providerConfig": providerConfig,
			"desired": int64(pool.Replicas), "ready": int64(0),
		})
		supernodes += int64(pool.Replicas)
		notReady = append(notReady, "Pool "+pool.Name+" not ready: not created yet")
	}

	resources := make(map[resource.Name]*resource.DesiredComposed, len(all))
	for _, d := range all {
		// Kubernetes' own converter, as encoding/json would write the object (composed.From writes
		// every zero number and false of k8s.io/api's types, which server-side apply would own).
		manifest, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d.manifest)
		if err != nil {
			return fmt.Errorf("cannot convert %s: %w", d.name, err)
		}
		// What a typed object always has and the Python function never sends.
		delete(manifest, "status")
		unstructured.RemoveNestedField(manifest, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(manifest, "spec", "template", "metadata", "creationTimestamp")
		// And what k8s.io/api's types write for fields left unset: null for a pointer without
		// omitempty (a gRPC probe's service), {} for a struct (a StatefulSet's updateStrategy).
		dropNulls(manifest)
		if strategy, ok, _ := unstructured.NestedMap(manifest, "spec", "updateStrategy"); ok && len(strategy) == 0 {
			unstructured.RemoveNestedField(manifest, "spec", "updateStrategy")
		}
		object := composed.New()
		object.Object = map[string]any{
			"apiVersion": "kubernetes.crossplane.io/v1alpha2",
			"kind":       "Object",
			"spec": map[string]any{
				"forProvider":       map[string]any{"manifest": manifest},
				"providerConfigRef": map[string]any{"name": providerConfig},
				"readiness":         d.readiness,
			},
		}
		resources[d.name] = &resource.DesiredComposed{Resource: object, Ready: resource.ReadyFalse}
	}
	if err := response.SetDesiredComposedResources(rsp, resources); err != nil {
		return err
	}

	xr := &resource.Composite{Resource: composite.New()}
	if err := xr.Resource.SetValue("status", map[string]any{
		"clusters":          int64(1),
		"desiredSupernodes": supernodes,
		"readySupernodes":   int64(0),
		"supernodes":        fmt.Sprintf("0/%d", supernodes),
		"version":           strings.SplitN(spec.SuperLink.Image, ":", 2)[1],
		"pools":             pools,
		"endpoints": map[string]any{
			"fleet":            fleet,
			"superlinkService": fmt.Sprintf("127.0.0.1:%d", controlPort),
			"portForward":      fmt.Sprintf("kubectl -n %s port-forward pod/%s-0 %d:%d", namespace, superlinkName, controlPort, controlPort),
		},
	}); err != nil {
		return err
	}
	if err := response.SetDesiredCompositeResource(rsp, xr); err != nil {
		return err
	}
	response.ConditionFalse(rsp, "SuperLinkReady", "Creating").
		WithMessage("SuperLink not ready: not created yet; SuperLink Service not ready: not created yet")
	response.ConditionFalse(rsp, "SuperNodesReady", "Creating").WithMessage(strings.Join(notReady, "; "))
	return nil
}

// dropNulls removes every null value from object, at every depth.
func dropNulls(object map[string]any) {
	for key, value := range object {
		switch v := value.(type) {
		case nil:
			delete(object, key)
		case map[string]any:
			dropNulls(v)
		case []any:
			for _, item := range v {
				if m, ok := item.(map[string]any); ok {
					dropNulls(m)
				}
			}
		}
	}
}

func labels(instance, name, component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/component":  component,
		"app.kubernetes.io/instance":   instance,
		"app.kubernetes.io/managed-by": "flower-operator",
		"app.kubernetes.io/name":       name,
	}
}

func port(protocol corev1.Protocol, number int32) networkingv1.NetworkPolicyPort {
	p := intstr.FromInt32(number)
	return networkingv1.NetworkPolicyPort{Protocol: &protocol, Port: &p}
}

func tcp(number int32) networkingv1.NetworkPolicyPort { return port(corev1.ProtocolTCP, number) }

func serviceAccount(name, namespace string, labels map[string]string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:                     metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta:                   metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

func superlinkStatefulSet(spec federationSpec, name, namespace string, labels map[string]string) *appsv1.StatefulSet {
	requests := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: kresource.MustParse("100m"), corev1.ResourceMemory: kresource.MustParse("256Mi"),
	}}
	telemetry := []corev1.EnvVar{{Name: "FLWR_TELEMETRY_ENABLED", Value: "0"}}
	superlink := container("superlink", spec.SuperLink.Image, 9095, []string{
		"--isolation=" + spec.IsolationMode,
		fmt.Sprintf("--control-api-address=127.0.0.1:%d", controlPort),
		"--serverappio-api-address=127.0.0.1:9091",
		"--simulationio-api-address=127.0.0.1:9096",
		"--insecure",
	}, telemetry, requests)
	superlink.Ports = []corev1.ContainerPort{{Name: "fleet", ContainerPort: fleetPort, Protocol: corev1.ProtocolTCP}}
	serverApp := container("superexec-serverapp", spec.SuperLink.SuperexecImage, 9096, []string{
		"--plugin-type=serverapp", "--appio-api-address=localhost:9091", "--insecure",
	}, telemetry, requests)
	return statefulSet(name, namespace, labels, 1, "", podSpec(name, nil, superlink, serverApp))
}

func poolStatefulSet(spec federationSpec, pool poolSpec, instance, namespace, fleet string) *appsv1.StatefulSet {
	name := instance + "-supernode-" + pool.Name
	poolLabels := labels(instance, "supernode", "pool-"+pool.Name)
	poolLabels["flower.flwr.ai/pool"] = pool.Name
	telemetry := corev1.EnvVar{Name: "FLWR_TELEMETRY_ENABLED", Value: "0"}
	index := corev1.EnvVar{Name: "FLOWER_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		APIVersion: "v1", FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']",
	}}}
	supernodeEnv := append(append(append([]corev1.EnvVar{}, spec.SuperNodes.Env...), index), telemetry)
	supernode := container("supernode", spec.SuperNodes.Image, 9097, []string{
		"--superlink=" + fleet,
		"--isolation=" + spec.IsolationMode,
		"--insecure",
		fmt.Sprintf("--clientappio-api-address=0.0.0.0:%d", clientAppPort),
		"--max-wait-time=300",
		"--node-config", nodeConfig(pool),
	}, supernodeEnv, pool.SupernodeResources)
	supernode.Ports = []corev1.ContainerPort{{Name: "clientappio", ContainerPort: clientAppPort, Protocol: corev1.ProtocolTCP}}
	var gpus corev1.ResourceRequirements
	if pool.GPU.Enabled {
		gpu := corev1.ResourceList{corev1.ResourceName(pool.GPU.Vendor + ".com/gpu"): kresource.MustParse("1")}
		gpus = corev1.ResourceRequirements{Limits: gpu, Requests: gpu}
	}
	clientApp := container("superexec-clientapp", pool.Images.SuperexecClientApp, 9098, []string{
		"--plugin-type=clientapp", fmt.Sprintf("--appio-api-address=localhost:%d", clientAppPort), "--insecure",
	}, append(append([]corev1.EnvVar{}, spec.SuperNodes.Env...), telemetry), gpus)
	pod := podSpec(instance+"-flower", pool.PodTemplate.Spec.NodeSelector, supernode, clientApp)
	return statefulSet(name, namespace, poolLabels, pool.Replicas, appsv1.ParallelPodManagement, pod)
}

// nodeConfig is Flower's --node-config text: keys in order, {index} the pod's index, strings quoted.
func nodeConfig(pool poolSpec) string {
	keys := make([]string, 0, len(pool.NodeConfig))
	for k := range pool.NodeConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := pool.NodeConfig[k]
		switch {
		case v == "{index}":
			v = "$(FLOWER_INDEX)"
		case v == "{replicas}":
			v = strconv.Itoa(int(pool.Replicas))
		default:
			v = strings.NewReplacer("{pool}", pool.Name, "{index}", "$(FLOWER_INDEX)").Replace(v)
			v = strconv.Quote(v)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

func container(name, image string, health int32, args []string, env []corev1.EnvVar, resources corev1.ResourceRequirements) corev1.Container {
	probe := corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: health}}
	scratch := "scratch-" + name
	return corev1.Container{
		Name:           name,
		Image:          image,
		Args:           append(args, fmt.Sprintf("--health-server-address=0.0.0.0:%d", health)),
		Env:            env,
		Resources:      resources,
		LivenessProbe:  &corev1.Probe{ProbeHandler: probe, InitialDelaySeconds: 10, PeriodSeconds: 20, FailureThreshold: 6},
		ReadinessProbe: &corev1.Probe{ProbeHandler: probe, PeriodSeconds: 10, FailureThreshold: 3},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: scratch, MountPath: "/app/.flwr", SubPath: "flwr"},
			{Name: scratch, MountPath: "/tmp", SubPath: "tmp"},
		},
	}
}

func podSpec(serviceAccount string, nodeSelector map[string]string, containers ...corev1.Container) corev1.PodSpec {
	volumes := make([]corev1.Volume, 0, len(containers))
	for _, c := range containers {
		volumes = append(volumes, corev1.Volume{Name: "scratch-" + c.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		ServiceAccountName:           serviceAccount,
		NodeSelector:                 nodeSelector,
		Containers:                   containers,
		Volumes:                      volumes,
		SecurityContext: &corev1.PodSecurityContext{
			FSGroup:        ptr.To[int64](uid),
			RunAsGroup:     ptr.To[int64](uid),
			RunAsUser:      ptr.To[int64](uid),
			RunAsNonRoot:   ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

func statefulSet(name, namespace string, labels map[string]string, replicas int32, policy appsv1.PodManagementPolicyType, pod corev1.PodSpec) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         name,
			PodManagementPolicy: policy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: typedgo serve|floor|load [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "floor":
		err = serveFloor(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: serve, floor or load", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	flags := flag.NewFlagSet("serve", flag.ExitOnError)
	address := flags.String("address", "127.0.0.1:9443", "where to listen for gRPC")
	_ = flags.Parse(args)
	return function.Serve(&composer{},
		function.Listen("tcp", *address),
		function.Insecure(true),
		// No metrics listener: the benchmark runs several servers on one machine.
		function.WithMetricsServer(""),
	)
}
