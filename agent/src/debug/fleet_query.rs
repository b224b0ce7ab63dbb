//! The fleet page's query string: filters, sorting, the window of rows
//! shown, refresh; parsed leniently (anything unknown keeps its default)
//! and written back as the page's links.

use crate::debug::html::{encode_component, query_pairs};
use crate::view::Standing;

/// Rows shown when the query names no `limit`.
pub const DEFAULT_LIMIT: usize = 200;

/// The most rows one page shows, whatever `limit` asks for: a refresh of
/// the fleet page costs memory and time in proportion to the rows shown
/// (benches/PERFORMANCE.md, "The pages at fleet scale").
pub const MAX_LIMIT: usize = 500;

/// A sortable column of the fleet table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `namespace/name`.
    Instance,
    /// The standing, worst first by default.
    Verdict,
    /// The signal.
    Signal,
    /// Ready and serving.
    Ready,
    /// Sampled / expected pods (sorted by pods missing).
    Pods,
    /// Memory pressure.
    Pressure,
    /// Sample age.
    Age,
    /// `spec.image`.
    Target,
    /// The baseline's image.
    Baseline,
    /// Healthy since.
    HealthySince,
    /// The last write's time.
    LastWrite,
    /// The owning replica.
    Owner,
}

impl Column {
    /// Every column, in no particular order.
    pub const ALL: [Column; 12] = [
        Column::Instance,
        Column::Verdict,
        Column::Signal,
        Column::Ready,
        Column::Pods,
        Column::Pressure,
        Column::Age,
        Column::Target,
        Column::Baseline,
        Column::HealthySince,
        Column::LastWrite,
        Column::Owner,
    ];

    /// Its name in `?sort=`.
    pub fn token(self) -> &'static str {
        match self {
            Column::Instance => "instance",
            Column::Verdict => "verdict",
            Column::Signal => "signal",
            Column::Ready => "ready",
            Column::Pods => "pods",
            Column::Pressure => "pressure",
            Column::Age => "age",
            Column::Target => "target",
            Column::Baseline => "baseline",
            Column::HealthySince => "healthy_since",
            Column::LastWrite => "last_write",
            Column::Owner => "owner",
        }
    }

    /// The direction a first click sorts in: worst first where there is a
    /// worst.
    pub fn first_descending(self) -> bool {
        matches!(
            self,
            Column::Verdict | Column::Pods | Column::Pressure | Column::Age | Column::LastWrite
        )
    }
}

/// The fleet page's query: filters, sorting, the window, refresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this standing.
    pub standing: Option<Standing>,
    /// Only rows containing this text (case-insensitive).
    pub text: String,
    /// Sorted by this column.
    pub sort: Column,
    /// Descending.
    pub descending: bool,
    /// Auto-refresh on.
    pub refresh: bool,
    /// At most this many rows (1 to [`MAX_LIMIT`]).
    pub limit: usize,
    /// The first row shown, counted from 0 in the sorted, filtered fleet.
    pub offset: usize,
}

impl Default for FleetQuery {
    fn default() -> Self {
        FleetQuery {
            namespace: None,
            standing: None,
            text: String::new(),
            sort: Column::Verdict,
            descending: true,
            refresh: true,
            limit: DEFAULT_LIMIT,
            offset: 0,
        }
    }
}

/// What a link changes in the query it is made from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Change {
    /// Sort by this column in this direction (and start at the top).
    pub sort: Option<(Column, bool)>,
    /// Turn auto-refresh on or off.
    pub refresh: Option<bool>,
    /// Start at this row.
    pub offset: Option<usize>,
}

impl FleetQuery {
    /// Reads `ns`, `verdict`, `q`, `sort`, `dir`, `refresh`, `limit`
    /// (bounded to 1..=[`MAX_LIMIT`]) and `offset`; anything unknown keeps
    /// its default.
    pub fn parse(query: &str) -> FleetQuery {
        let mut q = FleetQuery::default();
        let mut dir: Option<bool> = None;
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "ns" if !v.is_empty() => q.namespace = Some(v),
                "verdict" => q.standing = Standing::from_token(&v),
                "q" => q.text = v.trim().to_owned(),
                "sort" => {
                    if let Some(c) = Column::ALL.into_iter().find(|c| c.token() == v) {
                        q.sort = c;
                    }
                }
                "dir" => dir = Some(v == "desc"),
                "refresh" => q.refresh = v != "off",
                "limit" => {
                    if let Ok(n) = v.trim().parse::<usize>() {
                        q.limit = n.clamp(1, MAX_LIMIT);
                    }
                }
                "offset" => {
                    if let Ok(n) = v.trim().parse::<usize>() {
                        q.offset = n;
                    }
                }
                _ => {}
            }
        }
        q.descending = dir.unwrap_or_else(|| q.sort.first_descending());
        q
    }

    /// This query as a URL of the fleet page, with `change` applied. A new
    /// sort starts at the first row; `limit` and `offset` are written only
    /// when not the defaults.
    pub fn href(&self, change: Change) -> String {
        let (column, descending) = change.sort.unwrap_or((self.sort, self.descending));
        let offset = match change.sort {
            Some(_) => 0,
            None => change.offset.unwrap_or(self.offset),
        };
        let mut parts: Vec<String> = Vec::new();
        if let Some(ns) = &self.namespace {
            parts.push(format!("ns={}", encode_component(ns)));
        }
        if let Some(s) = self.standing {
            parts.push(format!("verdict={}", s.token()));
        }
        if !self.text.is_empty() {
            parts.push(format!("q={}", encode_component(&self.text)));
        }
        parts.push(format!("sort={}", column.token()));
        parts.push(format!("dir={}", if descending { "desc" } else { "asc" }));
        if self.limit != DEFAULT_LIMIT {
            parts.push(format!("limit={}", self.limit));
        }
        if offset != 0 {
            parts.push(format!("offset={offset}"));
        }
        if !change.refresh.unwrap_or(self.refresh) {
            parts.push("refresh=off".to_owned());
        }
        format!("/?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_with_defaults_and_round_trip() {
        let q = FleetQuery::parse("");
        assert_eq!(q, FleetQuery::default());
        assert_eq!(q.sort, Column::Verdict);
        assert!(q.descending);
        assert_eq!((q.limit, q.offset), (DEFAULT_LIMIT, 0));
        let q = FleetQuery::parse(
            "ns=kura&verdict=hard_stop&q=fd+time&sort=age&dir=asc&refresh=off&limit=50&offset=100",
        );
        assert_eq!(q.namespace.as_deref(), Some("kura"));
        assert_eq!(q.standing, Some(Standing::HardStop));
        assert_eq!(q.text, "fd time");
        assert_eq!(q.sort, Column::Age);
        assert!(!q.descending);
        assert!(!q.refresh);
        assert_eq!((q.limit, q.offset), (50, 100));
        let href = q.href(Change::default());
        assert_eq!(FleetQuery::parse(href.trim_start_matches("/?")), q);
        assert_eq!(
            FleetQuery::parse("sort=bogus&verdict=bogus").standing,
            None,
            "unknown values keep the defaults"
        );
        assert!(
            FleetQuery::parse("sort=age").descending,
            "age: oldest first"
        );
    }

    #[test]
    fn the_window_is_bounded() {
        assert_eq!(FleetQuery::parse("limit=100000").limit, MAX_LIMIT);
        assert_eq!(FleetQuery::parse("limit=0").limit, 1);
        assert_eq!(FleetQuery::parse("limit=-3").limit, DEFAULT_LIMIT);
        assert_eq!(FleetQuery::parse("limit=x&offset=y"), FleetQuery::default());
    }

    #[test]
    fn links_keep_the_window_and_a_new_sort_starts_at_the_top() {
        let q = FleetQuery::parse("verdict=unhealthy&limit=50&offset=100");
        let next = q.href(Change {
            offset: Some(150),
            ..Change::default()
        });
        assert_eq!(
            next,
            "/?verdict=unhealthy&sort=verdict&dir=desc&limit=50&offset=150"
        );
        let sorted = q.href(Change {
            sort: Some((Column::Age, true)),
            ..Change::default()
        });
        assert_eq!(sorted, "/?verdict=unhealthy&sort=age&dir=desc&limit=50");
        let paused = q.href(Change {
            refresh: Some(false),
            ..Change::default()
        });
        assert!(
            paused.ends_with("&limit=50&offset=100&refresh=off"),
            "{paused}"
        );
    }
}
