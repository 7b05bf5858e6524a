package floors

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
	"github.com/converge-dev/converge/internal/bmc"
	"github.com/converge-dev/converge/internal/drain"
	"github.com/converge-dev/converge/internal/setup"
)

// MachineUpgrade upgrades the Machines names of ns (each with a Ready
// MachineBMC of the same name serving Redfish, whose user and password are
// given) to image and version by hand, mu at a time, through c (give it the
// machineupgrade controller's budget, 20 QPS, burst 30): per Machine what
// the MachineUpgrade's steps do (cordon, evict the Node's Pods, patch
// image/version/boot, Redfish PowerCycle through the Machine's BMC, wait
// until the Machine is back with the new image on a Ready Node, uncordon),
// with no checkpoint. A MachineUpgrade's floor (bench/upgrade,
// bench/scale); the machine controllers of a running manager do the rest.
func MachineUpgrade(ctx context.Context, c client.Client, ns string, names []string, mu int, image, version, user, password string) (time.Duration, error) {
	// Verified as the controller verifies them: against the BMC CA.
	pool, perr := (&bmc.CATrust{Key: setup.BMCOptions{}.CASecretKey(), Cache: c, Live: c}).Pool(ctx)
	if perr != nil {
		return 0, perr
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	h := &byHand{c: c, hc: hc, ns: ns, image: image, version: version, user: user, password: password}
	start := time.Now()
	work := make(chan string)
	errs := make(chan error, mu)
	var wg sync.WaitGroup
	for range mu {
		wg.Go(func() {
			for nm := range work {
				if err := h.upgrade(ctx, nm); err != nil {
					errs <- fmt.Errorf("%s: %w", nm, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for _, nm := range names {
		select {
		case work <- nm:
		case err = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return time.Since(start), err
}

type byHand struct {
	c                                  client.Client
	hc                                 *http.Client
	ns, image, version, user, password string
}

func (h *byHand) upgrade(ctx context.Context, nm string) error {
	c, ns, image := h.c, h.ns, h.image
	m := &machinev1alpha1.Machine{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nm}, m); err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, node); err != nil {
		return err
	}
	if _, err := drain.Cordon(ctx, c, node); err != nil {
		return err
	}
	if _, err := drain.Evict(ctx, c, c, node.Name); err != nil {
		return err
	}
	raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"image": image, "version": h.version, "bootDevice": "Network", "bootOnce": true}})
	if err := c.Patch(ctx, m, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return err
	}
	b := &bmcv1alpha1.MachineBMC{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nm}, b); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.Status.RedfishEndpoint+"/redfish/v1/Systems/"+nm+"/Actions/ComputerSystem.Reset",
		strings.NewReader(`{"ResetType":"PowerCycle"}`))
	if err != nil {
		return err
	}
	req.SetBasicAuth(h.user, h.password)
	req.Header.Set("Content-Type", "application/json")
	rsp, err := h.hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, rsp.Body)
	_ = rsp.Body.Close()
	if rsp.StatusCode/100 != 2 {
		return fmt.Errorf("redfish reset: %s", rsp.Status)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: nm}, m); err != nil {
			return err
		}
		if m.EffectivePowerState() != machinev1alpha1.PowerOn || m.Status.PowerState != machinev1alpha1.PowerOn || m.Status.Phase != machinev1alpha1.PhaseRunning {
			continue
		}
		if err := c.Get(ctx, types.NamespacedName{Name: node.Name}, node); err != nil {
			return err
		}
		if node.Annotations[upgradev1alpha1.BootedImageAnnotation] == image && NodeReady(node) {
			break
		}
	}
	_, err = drain.Uncordon(ctx, c, node)
	return err
}
