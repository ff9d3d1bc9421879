package postgres_test

import (
	"context"
	"encoding/json"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/postgres"
)

// A Go service that shares the database saves an order and queues its
// confirmation email in one transaction: both or neither. (No Output
// line: it needs a database, so `go test` compiles it without running it.)
func ExampleBackend_EnqueueTx() {
	ctx := context.Background()
	url := os.Getenv("SONIQ_DATABASE_URL")
	appPool, err := pgxpool.New(ctx, url) // the service's own pool
	if err != nil {
		log.Fatal(err)
	}
	defer appPool.Close()
	jobs, err := postgres.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer jobs.Close()

	id, email := "b3f1c2", "ada@example.com"
	err = pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, email) VALUES ($1, $2)`, id, email); err != nil {
			return err
		}
		args, err := json.Marshal(map[string]string{"order": id})
		if err != nil {
			return err
		}
		job, err := jobs.EnqueueTx(ctx, tx, backends.EnqueueParams{
			Name: "emails.send", Args: args, Queue: "emails", DedupKey: "order-confirmation:" + id,
		})
		if err != nil {
			return err
		}
		log.Printf("order %s: confirmation job %s", id, job.ID)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
