package postgres

// Claims take turns. Several sidecars claiming the same queues at once
// each scan rows the others claimed after the scan's snapshot was taken:
// such a row still looks queued, and locking it follows its update chain,
// a wait that FOR UPDATE SKIP LOCKED does not skip (it waits for whoever
// holds the newest version, often another sidecar's result write). Eight
// sidecars sharing one database spent about 1.5 times one sidecar's
// Postgres CPU per job, 1.25 times with turns.
//
// So a claim for a reserve (takesTurn) first takes a transaction-scoped
// advisory lock per queue it claims from (one for "every queue" when it
// names none), in one order: its statement's snapshot then follows the
// commit of every earlier claim of those queues, and sees their rows as
// claimed. Nothing is kept on the
// session (transaction pooling works) and a claim holds its turn only for
// its own transaction. A claimer that stops mid-claim (SIGSTOP, a paused
// VM) would hold the turn until its connection dies, so the wait is
// bounded: past claimTurnWait the claim is sent again without a turn, as
// claims were taken before there were turns (correct, only dearer).

import (
	"errors"
	"hash/fnv"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/soniq-dev/soniq-sidecar/backends"
)

// claimTurnSpace is the first key of the claim turns' two-key advisory
// locks: a space of their own, apart from the limits' one-key locks.
const claimTurnSpace int32 = 0x534e5154 // "SNQT"

// claimTurnWait bounds the wait for a turn. A claim holds its turn for a
// few milliseconds; a queue of claimers ahead rarely takes more than a few
// tens.
const claimTurnWait = "100ms"

// claimTurnIDs are the second keys of the turns a claim of queues takes,
// ascending (every claimer takes them in one order, so none waits for a
// turn while holding one another waits for). No queues: every queue's
// claim, one turn of its own.
func claimTurnIDs(queues []string) []int32 {
	if len(queues) == 0 {
		return []int32{turnID("\x00every queue")}
	}
	ids := make([]int32, 0, len(queues))
	for _, q := range queues {
		ids = append(ids, turnID(q))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func turnID(queue string) int32 {
	h := fnv.New32a()
	h.Write([]byte(queue))
	return int32(h.Sum32())
}

// claimTurnPrelude is the claim's prelude with its turns: the planner
// settings for the transaction, then, under the bound of claimTurnWait
// (set for this statement only: the session's own lock_timeout is put
// back for the rest of the transaction), the turns' locks, and the worker
// row's status. Each step reads the one before it, so they run in order.
// $1 the worker id, $2 the turns' ids, $3 the bound, $4 claimTurnSpace.
const claimTurnPrelude = `SELECT (SELECT status FROM soniq_workers WHERE id = $1::uuid)
FROM (SELECT ` + plannerSettings + `, current_setting('lock_timeout') AS prev) AS settings
CROSS JOIN LATERAL (SELECT set_config('lock_timeout', $3, true) AS bound WHERE settings.prev IS NOT NULL) AS b
CROSS JOIN LATERAL (SELECT count(pg_advisory_xact_lock($4::int4, t.id)) AS n
	FROM unnest($2::int4[]) WITH ORDINALITY AS t(id, o) WHERE b.bound IS NOT NULL) AS turn
CROSS JOIN LATERAL (SELECT set_config('lock_timeout', settings.prev, true) WHERE turn.n IS NOT NULL) AS restored`

// takesTurn reports whether claim p takes its turn: a claim for a reserve
// does. A claim of free slots alone does not: with claim_ahead 0 a
// sidecar claims a few rows at a time, many times a second, and eight
// such sidecars taking turns ran at a fifth less than without (Postgres'
// CPU per job the same), where a reserve's claims come seldom and large.
func takesTurn(p backends.ClaimParams) bool { return p.Ahead > 0 }

// turnTimedOut reports whether err is a claim's wait for its turn that
// ran out (lock_not_available): the claim is sent again without a turn.
func turnTimedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}
