// A Go program on go-sql-driver/mysql (Debian's golang-github-go-sql-driver-mysql-dev) that
// scans what applications scan: DECIMAL into float64 and string, DATETIME into time.Time
// (parseTime=true), aggregates of both, and a NULL. For tests/tests/shim_clients.rs, which
// runs it against server-shim and against MariaDB and compares the output. Built by
// tests/clients/install in GOPATH mode, like ../pool.
//
// Env: PORT, DB_USER, DB_PASSWORD, DB_NAME (an empty database). Prints one line per check.
package main

import (
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func must(err error, what string) {
	if err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(1)
	}
}

func main() {
	dsn := fmt.Sprintf("%s:%s@tcp(127.0.0.1:%s)/%s?parseTime=true",
		os.Getenv("DB_USER"), os.Getenv("DB_PASSWORD"), os.Getenv("PORT"), os.Getenv("DB_NAME"))
	db, err := sql.Open("mysql", dsn)
	must(err, "open")
	defer db.Close()
	for _, stmt := range []string{
		"CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, price DECIMAL(10,2) NOT NULL, placed DATETIME NOT NULL, note VARCHAR(20))",
		"INSERT INTO orders (price, placed, note) VALUES (5, '2020-01-01 10:00:00', 'a'), (8.5, '2021-03-04 05:06:07', NULL)",
	} {
		_, err := db.Exec(stmt)
		must(err, stmt)
	}

	var sum, avg string
	var total float64
	var first, last time.Time
	var n int64
	must(db.QueryRow("SELECT SUM(price), AVG(price), SUM(price), MIN(placed), MAX(placed), COUNT(*) FROM orders").
		Scan(&sum, &avg, &total, &first, &last, &n), "aggregates")
	fmt.Println("sum", sum, "avg", avg, "float", total, "count", n)
	fmt.Println("min", first.Format(time.RFC3339), "max", last.Format(time.RFC3339))

	rows, err := db.Query("SELECT id, price, placed, note FROM orders ORDER BY id")
	must(err, "rows")
	defer rows.Close()
	for rows.Next() {
		var id int64
		var price float64
		var placed time.Time
		var note sql.NullString
		must(rows.Scan(&id, &price, &placed, &note), "scan")
		fmt.Println("row", id, price, placed.Format(time.RFC3339), note.Valid, note.String)
	}
	must(rows.Err(), "rows")

	// The same through a prepared statement (the binary protocol).
	stmt, err := db.Prepare("SELECT MAX(placed), SUM(price) FROM orders WHERE id >= ?")
	must(err, "prepare")
	defer stmt.Close()
	must(stmt.QueryRow(1).Scan(&last, &sum), "prepared")
	fmt.Println("prepared", last.Format(time.RFC3339), sum)
}
