// Package upgradecli implements `converge upgrade`: status (the step table,
// each Machine's progress and one timeline of the Events of every object
// the upgrade touched) and the verbs pause, resume, retry, skip and abort,
// each one patch of the MachineUpgrade.
package upgradecli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bmcv1alpha1 "github.com/converge-dev/converge/api/bmc/v1alpha1"
	machinev1alpha1 "github.com/converge-dev/converge/api/machine/v1alpha1"
	upgradev1alpha1 "github.com/converge-dev/converge/api/upgrade/v1alpha1"
)

func patch(ctx context.Context, c client.Client, ns, name string, body map[string]any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	u := &upgradev1alpha1.MachineUpgrade{}
	u.Namespace, u.Name = ns, name
	if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return fmt.Errorf("patching MachineUpgrade %s/%s: %w", ns, name, err)
	}
	return nil
}

// Pause sets spec.paused: no new step starts; a step in flight finishes.
func Pause(ctx context.Context, c client.Client, ns, name string) error {
	return patch(ctx, c, ns, name, map[string]any{"spec": map[string]any{"paused": true}})
}

// Resume clears spec.paused.
func Resume(ctx context.Context, c client.Client, ns, name string) error {
	return patch(ctx, c, ns, name, map[string]any{"spec": map[string]any{"paused": false}})
}

// Abort sets spec.abort (it cannot be taken back).
func Abort(ctx context.Context, c client.Client, ns, name string) error {
	return patch(ctx, c, ns, name, map[string]any{"spec": map[string]any{"abort": true}})
}

// Retry writes a new value of the retry annotation: the failed step of each
// failed Machine (or the failed checks) gets fresh attempts.
func Retry(ctx context.Context, c client.Client, ns, name string, now time.Time) error {
	return patch(ctx, c, ns, name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		upgradev1alpha1.RetryAnnotation: strconv.FormatInt(now.UnixNano(), 10)}}})
}

// Skip marks machine skipped, with reason.
func Skip(ctx context.Context, c client.Client, ns, name, machine, reason string) error {
	if reason == "" {
		return fmt.Errorf("skip needs a reason")
	}
	return patch(ctx, c, ns, name, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		upgradev1alpha1.SkipAnnotationPrefix + machine: reason}}})
}

// Status prints the upgrade's summary, its steps, each Machine's progress
// and the merged timeline of the last events (at most events) of the
// upgrade, its Machines, their Nodes and BMCs, and the Pods it evicted.
func Status(ctx context.Context, c client.Client, out io.Writer, ns, name string, events int, now time.Time) error {
	u := &upgradev1alpha1.MachineUpgrade{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		return fmt.Errorf("reading MachineUpgrade %s/%s: %w", ns, name, err)
	}
	_, _ = fmt.Fprintf(out, "MachineUpgrade %s/%s: %s to %s %s, %s done\n", ns, name, orDash(string(u.Status.Phase)), u.Spec.Image, u.Spec.Version, orDash(u.Status.Done))
	for _, typ := range []string{upgradev1alpha1.ReadyCondition, upgradev1alpha1.ProgressingCondition, upgradev1alpha1.StalledCondition} {
		if cond := meta.FindStatusCondition(u.Status.Conditions, typ); cond != nil {
			_, _ = fmt.Fprintf(out, "  %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}

	_, _ = fmt.Fprintln(out, "\nSTEPS")
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "STEP\tSTATE\tATTEMPTS\tSTARTED\tFINISHED\tMESSAGE")
	for _, st := range u.Status.Steps {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", st.Name, st.State, st.Attempts, ago(st.Started, now), ago(st.Finished, now), st.Message)
	}
	_ = w.Flush()

	_, _ = fmt.Fprintln(out, "\nMACHINES")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "MACHINE\tSTATE\tSTEP\tSTEP STATE\tATTEMPTS\tFROM\tSTARTED\tFINISHED\tMESSAGE")
	for _, mp := range u.Status.Machines {
		msg := mp.Message
		if mp.LastError != "" {
			msg = strings.TrimSpace(msg + " last error: " + mp.LastError)
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s %s\t%s\t%s\t%s\n", mp.Name, mp.State, orDash(string(mp.Step)), orDash(string(mp.StepState)), mp.Attempts,
			orDash(mp.PreviousImage), orDash(mp.PreviousVersion), ago(mp.Started, now), ago(mp.Finished, now), msg)
	}
	_ = w.Flush()

	lines, err := timeline(ctx, c, u)
	if err != nil {
		return err
	}
	if events > 0 && len(lines) > events {
		lines = lines[len(lines)-events:]
	}
	_, _ = fmt.Fprintln(out, "\nEVENTS")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "AGE\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for _, l := range lines {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", ago(&l.at, now), l.typ, l.reason, l.object, l.note)
	}
	return w.Flush()
}

type line struct {
	at     metav1.Time
	typ    string
	reason string
	object string
	note   string
}

// timeline merges the Events of the upgrade, its Machines, their Nodes and
// MachineBMCs, and the Pods it evicted, oldest first.
func timeline(ctx context.Context, c client.Client, u *upgradev1alpha1.MachineUpgrade) ([]line, error) {
	want := map[string]bool{"MachineUpgrade/" + u.Name: true}
	nodes := map[string]bool{}
	for _, mp := range u.Status.Machines {
		want["Machine/"+mp.Name] = true
		m := &machinev1alpha1.Machine{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: mp.Name}, m); err == nil && m.Status.NodeRef != nil {
			nodes[m.Status.NodeRef.Name] = true
		}
	}
	bmcs := &bmcv1alpha1.MachineBMCList{}
	if err := c.List(ctx, bmcs, client.InNamespace(u.Namespace)); err == nil {
		for _, b := range bmcs.Items {
			if want["Machine/"+b.Spec.MachineRef.Name] {
				want["MachineBMC/"+b.Name] = true
			}
		}
	}
	var out []line
	seen := map[string]bool{}
	add := func(ns string) error {
		l := &eventsv1.EventList{}
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing Events: %w", err)
		}
		for _, e := range l.Items {
			if seen[string(e.UID)] {
				continue
			}
			seen[string(e.UID)] = true
			key := e.Regarding.Kind + "/" + e.Regarding.Name
			ours := want[key] || (e.Regarding.Kind == "Node" && nodes[e.Regarding.Name])
			if !ours {
				continue
			}
			at := e.EventTime.Time
			if e.Series != nil {
				at = e.Series.LastObservedTime.Time
			}
			if at.IsZero() {
				at = e.DeprecatedLastTimestamp.Time
			}
			obj := key
			if e.Related != nil && e.Regarding.Kind == "MachineUpgrade" {
				obj += " (" + e.Related.Kind + "/" + e.Related.Name + ")"
			}
			out = append(out, line{at: metav1.Time{Time: at}, typ: e.Type, reason: e.Reason, object: obj, note: e.Note})
		}
		return nil
	}
	if err := add(u.Namespace); err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		if err := add("default"); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Time.Before(out[j].at.Time) })
	return out, nil
}

// ago says how long before now t was, or "-".
func ago(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return now.Sub(t.Time).Round(time.Second).String() + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
