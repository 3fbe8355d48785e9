// A Go database/sql pool on go-sql-driver/mysql (Debian's
// golang-github-go-sql-driver-mysql-dev), for the parking test
// (tests/tests/relay_parking.rs). Built by tests/clients/install in GOPATH mode against
// Debian's /usr/share/gocode, so it needs no module download.
//
// Env: PORT, DB_USER, DB_PASSWORD. Prints the pooled session's CONNECTION_ID(), then keeps the
// pool alive the way Go services do, with db.Ping() (COM_PING) every 200 ms, until a line
// arrives on standard input; then prints CONNECTION_ID() again through the pool and exits 0.
// One connection (SetMaxOpenConns(1)), never retired (no SetConnMaxLifetime), so both queries
// and every ping use the same session.
package main

import (
	"bufio"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func connectionID(db *sql.DB) int64 {
	var id int64
	if err := db.QueryRow("SELECT CONNECTION_ID()").Scan(&id); err != nil {
		fmt.Fprintln(os.Stderr, "query:", err)
		os.Exit(1)
	}
	return id
}

func main() {
	dsn := fmt.Sprintf("%s:%s@tcp(127.0.0.1:%s)/", os.Getenv("DB_USER"), os.Getenv("DB_PASSWORD"), os.Getenv("PORT"))
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	fmt.Println(connectionID(db))

	line := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(line)
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-tick.C:
			if err := db.Ping(); err != nil {
				fmt.Fprintln(os.Stderr, "ping:", err)
				os.Exit(1)
			}
		case <-line:
			waiting = false
		}
	}
	fmt.Println(connectionID(db))
	db.Close()
}
