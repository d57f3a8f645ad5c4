//! Width-aware, redraw-safe terminal output for `demo` and `ctl watch`.
//!
//! A live display redraws itself by moving the cursor up over the lines it
//! drew last time. That only works if each of those lines took exactly one
//! row of the screen: a line wider than the terminal wraps, the cursor
//! moves up too few rows, and every frame leaves debris. So no line drawn
//! here is wider than the terminal (minus one column, see [`usable`]), and
//! tables drop their least useful columns before anything would wrap.
//!
//! Widths are counted in characters, not bytes.

use parking_lot::Mutex;
use std::io::{self, IsTerminal, Write};

/// Marks text cut to fit.
pub const ELLIPSIS: char = '…';

/// Lines a diagnostic takes below a table, at most.
pub const DIAGNOSTIC_LINES: usize = 3;

/// A fill column narrower than this is left out of its row: a few letters
/// and an ellipsis say nothing (the text is shown below the table anyway).
const MIN_FILL: usize = 8;

/// Terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub cols: usize,
    pub rows: usize,
}

/// The size of the terminal on stdout: the kernel's idea of it (which
/// follows resizes), else `COLUMNS`/`LINES`, else 80x24. Measured again
/// for every frame because the terminal may be resized at any time.
pub fn size() -> Size {
    let (cols, rows) = ioctl_size().unwrap_or((0, 0));
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
    };
    Size {
        cols: if cols > 0 {
            cols
        } else {
            env("COLUMNS").unwrap_or(80)
        },
        rows: if rows > 0 {
            rows
        } else {
            env("LINES").unwrap_or(24)
        },
    }
}

#[cfg(unix)]
fn ioctl_size() -> Option<(usize, usize)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct we pass, which
    // lives for the whole call; on a descriptor that is not a terminal it
    // fails with -1 and writes nothing.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0).then_some((usize::from(ws.ws_col), usize::from(ws.ws_row)))
}

#[cfg(not(unix))]
fn ioctl_size() -> Option<(usize, usize)> {
    None
}

/// The widest line drawn on a terminal `cols` wide. The last column stays
/// empty: terminals disagree on whether a character printed there wraps at
/// once or only when the next one arrives, and with it unused no line ever
/// wraps, so the redraw's cursor arithmetic holds everywhere.
pub fn usable(cols: usize) -> usize {
    cols.saturating_sub(1).max(1)
}

/// Characters in `s`.
pub fn width(s: &str) -> usize {
    s.chars().count()
}

/// `s` on one line: control characters (newlines, tabs, escapes a server
/// or database might put in a diagnostic) would move the cursor behind the
/// renderer's back, so runs of whitespace become one space and any other
/// control character a `?`.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.trim().chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.push(if c.is_control() { '?' } else { c });
    }
    out
}

/// `s` cut to `max` characters, the last of them an ellipsis when cut.
pub fn cut(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push(ELLIPSIS);
    out
}

/// `s` wrapped at word boundaries into lines of at most `max` characters,
/// at most `lines` of them; the last ends with an ellipsis if text was left
/// out. A word longer than a line is broken.
pub fn wrap(s: &str, max: usize, lines: usize) -> Vec<String> {
    let max = max.max(1);
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        let mut word = word;
        loop {
            let need = if line.is_empty() {
                width(word)
            } else {
                width(&line) + 1 + width(word)
            };
            if need <= max {
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(word);
                break;
            }
            if !line.is_empty() {
                out.push(std::mem::take(&mut line));
                continue;
            }
            // A word wider than a whole line: break it.
            let split = word.char_indices().nth(max).map_or(word.len(), |(i, _)| i);
            out.push(word[..split].to_string());
            word = &word[split..];
            if word.is_empty() {
                break;
            }
        }
    }
    if !line.is_empty() {
        out.push(line);
    }
    if out.len() > lines {
        out.truncate(lines);
        if let Some(last) = out.last_mut() {
            // Room for the ellipsis that says something follows.
            let kept: String = last.chars().take(max.saturating_sub(1)).collect();
            *last = format!("{kept}{ELLIPSIS}");
        }
    }
    out
}

/// One column of a [`Table`].
#[derive(Debug, Clone)]
pub struct Column {
    pub header: &'static str,
    /// Right-aligned (numbers).
    pub right: bool,
    /// 0: never dropped. Otherwise columns are dropped, highest rank first,
    /// while the table is wider than the terminal.
    pub drop: u8,
    /// May be cut (with an ellipsis) down to this many characters once no
    /// droppable column is left.
    pub shrink_to: Option<usize>,
}

impl Column {
    pub fn new(header: &'static str) -> Self {
        Column {
            header,
            right: false,
            drop: 0,
            shrink_to: None,
        }
    }
    pub fn right(mut self) -> Self {
        self.right = true;
        self
    }
    pub fn drop(mut self, rank: u8) -> Self {
        self.drop = rank;
        self
    }
    pub fn shrink_to(mut self, min: usize) -> Self {
        self.shrink_to = Some(min);
        self
    }
}

/// One row: its cells and an optional trailing text (a diagnostic) that
/// takes whatever width is left on the row.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub cells: Vec<String>,
    pub fill: Option<String>,
}

/// A table laid out to a width.
#[derive(Debug, Clone)]
pub struct Table {
    pub columns: Vec<Column>,
    /// Whether the first line is the column headers.
    pub headers: bool,
    /// Left margin.
    pub indent: usize,
    pub rows: Vec<Row>,
}

/// A laid-out table: its lines, and for each row whether its fill text
/// was cut or left out (so the caller shows it in full elsewhere).
#[derive(Debug, Clone)]
pub struct Laid {
    pub lines: Vec<String>,
    pub fill_cut: Vec<bool>,
}

impl Table {
    /// Lay the table out in at most `max` characters per line (`None`: no
    /// limit, for pipes and logs).
    pub fn layout(&self, max: Option<usize>) -> Laid {
        let mut widths = self.widths();
        let shown = self.fit(&mut widths, max);
        let fitted = Fitted {
            table: self,
            widths,
            shown,
            max,
        };
        let mut laid = Laid {
            lines: Vec::new(),
            fill_cut: Vec::new(),
        };
        if self.headers {
            let headers: Vec<String> = self.columns.iter().map(|c| c.header.into()).collect();
            laid.lines.push(fitted.line(&headers, None).0);
        }
        for row in &self.rows {
            let (l, fill_cut) = fitted.line(&row.cells, row.fill.as_deref());
            laid.lines.push(l);
            laid.fill_cut.push(fill_cut);
        }
        laid
    }

    /// Each column's natural width: its widest cell, or its header when
    /// headers are shown and wider.
    fn widths(&self) -> Vec<usize> {
        let n = self.columns.len();
        let mut widths: Vec<usize> = self
            .columns
            .iter()
            .map(|c| if self.headers { width(c.header) } else { 0 })
            .collect();
        for row in &self.rows {
            for (i, cell) in row.cells.iter().enumerate().take(n) {
                widths[i] = widths[i].max(width(cell));
            }
        }
        widths
    }

    /// The width of a line of the shown columns: the indent, the columns
    /// and one space between each two.
    fn total(&self, widths: &[usize], shown: &[bool]) -> usize {
        let n = self.columns.len();
        let cols: Vec<usize> = (0..n).filter(|&i| shown[i]).map(|i| widths[i]).collect();
        self.indent + cols.iter().sum::<usize>() + cols.len().saturating_sub(1)
    }

    /// Which columns are shown in `max` characters: droppable ones are
    /// left out until the table fits, then the widths of those that may
    /// be cut are narrowed (in `widths`).
    fn fit(&self, widths: &mut [usize], max: Option<usize>) -> Vec<bool> {
        let n = self.columns.len();
        let mut shown = vec![true; n];
        if let Some(max) = max {
            // Drop columns, least useful first, until the table fits.
            while self.total(widths, &shown) > max {
                let victim = (0..n)
                    .filter(|&i| shown[i] && self.columns[i].drop > 0)
                    .max_by_key(|&i| self.columns[i].drop);
                match victim {
                    Some(i) => shown[i] = false,
                    None => break,
                }
            }
            // Then cut the columns that may be cut.
            for i in 0..n {
                let over = self.total(widths, &shown).saturating_sub(max);
                if over == 0 {
                    break;
                }
                if let (true, Some(min)) = (shown[i], self.columns[i].shrink_to) {
                    widths[i] = widths[i].saturating_sub(over).max(min.min(widths[i]));
                }
            }
        }
        shown
    }
}

/// A table whose shown columns and their widths are decided: what lays
/// out its lines.
struct Fitted<'a> {
    table: &'a Table,
    widths: Vec<usize>,
    shown: Vec<bool>,
    max: Option<usize>,
}

impl Fitted<'_> {
    /// One line: the shown cells, then the fill text in what is left of
    /// the width; and whether the fill was cut or left out.
    fn line(&self, cells: &[String], fill: Option<&str>) -> (String, bool) {
        let (n, shown, widths) = (self.table.columns.len(), &self.shown, &self.widths);
        // Trailing empty cells are not padded, so a row's fill text
        // starts right after its last non-empty cell.
        let last = (0..n)
            .filter(|&i| shown[i] && cells.get(i).is_some_and(|c| !c.is_empty()))
            .max();
        let mut out = " ".repeat(self.table.indent);
        let mut first = true;
        for i in (0..n).filter(|&i| shown[i] && Some(i) <= last) {
            if !first {
                out.push(' ');
            }
            first = false;
            let cell = cut(cells.get(i).map_or("", String::as_str), widths[i]);
            let pad = " ".repeat(widths[i] - width(&cell));
            if self.table.columns[i].right {
                out.push_str(&pad);
                out.push_str(&cell);
            } else {
                out.push_str(&cell);
                out.push_str(&pad);
            }
        }
        let mut fill_cut = false;
        if let Some(fill) = fill.filter(|f| !f.is_empty()) {
            let start = width(&out) + 2;
            match self.max {
                None => out.push_str(&format!("  {fill}")),
                Some(max) if max >= start + MIN_FILL => {
                    let shown = cut(fill, max - start);
                    fill_cut = shown != fill;
                    out.push_str("  ");
                    out.push_str(&shown);
                }
                Some(_) => fill_cut = true,
            }
        }
        let out = out.trim_end().to_string();
        (self.max.map_or(out.clone(), |m| cut(&out, m)), fill_cut)
    }
}

/// A diagnostic shown below a table: `label: text`, wrapped to the width,
/// [`DIAGNOSTIC_LINES`] lines at most, continuation lines indented.
pub fn diagnostic(label: &str, text: &str, indent: usize, max: usize) -> Vec<String> {
    // Continuation lines are indented two more than the first.
    let lines = wrap(
        &format!("{label}: {}", one_line(text)),
        max.saturating_sub(indent + 2).max(1),
        DIAGNOSTIC_LINES,
    );
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let pad = if i == 0 { indent } else { indent + 2 };
            format!("{}{l}", " ".repeat(pad))
        })
        .collect()
}

/// Log output held back while a live display owns the terminal: a log
/// line written to the same terminal between two frames would shift the
/// frame down and break the redraw's cursor arithmetic. `None`: no display
/// is live, logs go straight to stderr.
static HELD: Mutex<Option<Vec<u8>>> = Mutex::new(None);

/// Held log output kept at most; beyond it lines are dropped (and counted)
/// rather than growing memory while nobody reads the terminal.
const HELD_MAX: usize = 64 * 1024;

/// Bytes of log output dropped since the last frame.
static DROPPED: Mutex<usize> = Mutex::new(0);

/// The log writer of the binary: stderr, except that while a [`Screen`]
/// is live on the terminal the output waits for the next frame, which
/// prints it above itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(held) = HELD.lock().as_mut() {
            if held.len() + buf.len() <= HELD_MAX {
                held.extend_from_slice(buf);
            } else {
                *DROPPED.lock() += buf.len();
            }
            return Ok(buf.len());
        }
        io::stderr().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Write out the log output held since the last frame.
fn release_held(keep_holding: bool) -> io::Result<()> {
    let held = {
        let mut slot = HELD.lock();
        let held = slot.take();
        if keep_holding {
            *slot = Some(Vec::new());
        }
        held
    };
    let dropped = std::mem::take(&mut *DROPPED.lock());
    let mut err = io::stderr().lock();
    if let Some(held) = held.filter(|h| !h.is_empty()) {
        err.write_all(&held)?;
    }
    if dropped > 0 {
        writeln!(
            err,
            "({dropped} bytes of log output dropped while the display was drawn)"
        )?;
    }
    err.flush()
}

/// A live display that redraws its frame in place on a terminal.
#[derive(Debug, Default)]
pub struct Screen {
    /// Lines of the last frame (each took exactly one row).
    drawn: usize,
    /// The width the last frame was drawn at.
    cols: Option<usize>,
    /// Lines printed once above the frame, drawn again after a resize.
    preamble: Vec<String>,
    /// Whether log output is held for this display.
    holding: bool,
}

impl Drop for Screen {
    fn drop(&mut self) {
        if self.holding {
            // Nothing is lost when the display ends: what was held is
            // printed below the last frame.
            let _ = release_held(false);
        }
    }
}

impl Screen {
    /// A display whose frames go below `preamble`, which the caller has
    /// already printed.
    pub fn new(preamble: Vec<String>) -> Self {
        Screen {
            drawn: 0,
            cols: None,
            preamble,
            holding: false,
        }
    }

    /// Replace the last frame with `frame`, laid out for `size`. Lines are
    /// cut to the width and a frame taller than the terminal is cut to
    /// it: cursor movement cannot reach rows scrolled off the top.
    pub fn draw(&mut self, out: &mut impl Write, size: Size, frame: &[String]) -> io::Result<()> {
        let max = usable(size.cols);
        let mut buf = String::new();
        if self.cols.is_some_and(|c| c != size.cols) {
            // After a resize some terminals reflow the old lines and others
            // cut them, so how many rows the last frame takes now is
            // unknown: start again from a clean screen.
            buf.push_str("\x1b[H\x1b[2J");
            for line in &self.preamble {
                buf.push_str(&cut(line, max));
                buf.push('\n');
            }
        } else if self.drawn > 0 {
            buf.push_str(&format!("\x1b[{}A", self.drawn));
        }
        // Clear from here down: a shorter frame leaves nothing behind.
        buf.push_str("\r\x1b[J");
        let room = size.rows.saturating_sub(1).max(1);
        let mut lines: Vec<String> = frame.iter().map(|l| cut(l, max)).collect();
        if lines.len() > room {
            let hidden = lines.len() - (room - 1);
            lines.truncate(room - 1);
            lines.push(cut(&format!("{ELLIPSIS} {hidden} more lines"), max));
        }
        // Logs only compete for the rows when they go to a terminal too.
        if !self.holding && io::stderr().is_terminal() {
            *HELD.lock() = Some(Vec::new());
            self.holding = true;
        }
        // The old frame is gone from the screen here: held log lines go
        // where it was, above the new frame, and scroll away with the
        // output above (they may wrap; they are never redrawn).
        out.write_all(buf.as_bytes())?;
        out.flush()?;
        if self.holding {
            // Logs that cannot be written are not the frame's problem.
            let _ = release_held(true);
        }
        let mut buf = String::new();
        for line in &lines {
            buf.push_str(line);
            buf.push('\n');
        }
        out.write_all(buf.as_bytes())?;
        out.flush()?;
        self.drawn = lines.len();
        self.cols = Some(size.cols);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct12_cut_counts_characters_and_marks_the_cut() {
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo wörld", 6), "héllo…");
        assert_eq!(width(&cut("ééééééééé", 4)), 4);
        assert_eq!(cut("abc", 0), "");
    }

    #[test]
    fn ct12_wrap_is_bounded_and_says_so() {
        let text = "one two three four five six seven eight nine ten";
        let lines = wrap(text, 10, 2);
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| width(l) <= 10), "{lines:?}");
        assert!(lines[1].ends_with(ELLIPSIS));
        assert_eq!(wrap("abcdefghij", 4, 5), ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn ct12_one_line_removes_control_characters() {
        assert_eq!(one_line(" a\n\tb\x1b[2Jc "), "a b?[2Jc");
    }

    #[test]
    fn ct12_table_drops_columns_before_it_would_wrap() {
        let table = Table {
            columns: vec![
                Column::new("ID").shrink_to(6),
                Column::new("BAR").drop(3),
                Column::new("RATE").right().drop(1),
                Column::new("ETA").drop(2),
            ],
            headers: true,
            indent: 0,
            rows: vec![Row {
                cells: vec![
                    "events.tag-count.v1".into(),
                    "[##########]".into(),
                    "1234 rows/s".into(),
                    "ETA 12s".into(),
                ],
                fill: Some("a long diagnostic that cannot fit".into()),
            }],
        };
        let wide = table.layout(None);
        assert!(wide.lines[1].contains("[###") && wide.lines[1].contains("diagnostic"));
        for max in [10, 20, 30, 40, 79] {
            let laid = table.layout(Some(max));
            assert!(
                laid.lines.iter().all(|l| width(l) <= max),
                "{max}: {laid:?}"
            );
        }
        let laid = table.layout(Some(40));
        assert!(!laid.lines[1].contains('#'), "the bar goes first");
        assert!(laid.lines[1].contains("rows/s"), "{laid:?}");
        assert!(laid.fill_cut[0]);
    }
}
