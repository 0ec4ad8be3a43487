// Command cert-manager runs cert-manager's own controllers for the end-to-end
// clusters: the Certificate lifecycle (trigger, key manager, request manager,
// issuing, readiness, revision manager), CertificateRequest approval, Issuers
// and ClusterIssuers, and the CA and self-signed signers.
//
// The release's command (cmd/controller) is a Go module the module proxy does
// not serve, so this wires the same controllers, as they register themselves
// in the cert-manager module's public packages; ACME, Vault, Venafi, the
// ingress/gateway shims and the webhook are left out (the e2e issues from a
// CA). It runs on the host with a kubeconfig, like the other e2e controllers.
//
// Its release is pinned in tools/crossplane/go.mod, beside Crossplane core's, and its
// CRDs ship in the same module (deploy/crds).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"

	// Each import registers its controller (or issuer) in an init function.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster to serve")
	clusterResources := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets ClusterIssuers refer to")
	workers := flag.Int("workers", 2, "workers per controller")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *clusterResources, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterResources string, workers int) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterResources},
		CertificateOptions: controllerpkg.CertificateOptions{
			// The release defaults: a failed request is retried after 1h (up to 32h).
			CertificateRequestMinimumBackoffDuration: time.Hour,
		},
	})
	if err != nil {
		return err
	}
	known := controllerpkg.Known()
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	sort.Strings(names)
	controllers := make(map[string]controllerpkg.Interface, len(names))
	for _, name := range names {
		c, err := known[name](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		controllers[name] = c
	}
	// Informers start once every controller has asked for the ones it needs;
	// all contexts of one factory share the same informer factories.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	klog.InfoS("starting controllers", "controllers", names)

	var wg sync.WaitGroup
	errs := make(chan error, len(controllers))
	for name, c := range controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
