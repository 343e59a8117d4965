//! The deny list: shell commands refused because they destroy a machine, not a project.
//!
//! This is a guard rail against a model's mistakes and against the plain forms of an injected
//! command, not a sandbox. The command line is read roughly the way bash reads it: quotes and
//! escapes removed, `;`, `&&`, `||`, `|`, `&`, subshells, `$(...)` and backticks split into simple
//! commands, redirections noted, here-strings and here-documents kept. Each simple command is
//! then looked through the way it would run:
//!
//! - wrappers are peeled off with their options (`sudo -u root`, `env -i`, `/usr/bin/env`,
//!   `busybox`, `nohup`, `timeout 10`, `xargs`, `nice -n 5`, `flock FILE`, ...), and a shell
//!   started with a script (`bash -lc '...'`, `sh -c`, `su -c`, `eval`, `env -S`, a here-string or
//!   here-document fed to a shell, `echo ... | sh`, `find -exec sh -c`) has that script checked
//!   the same way, a few levels deep;
//! - paths are resolved as the shell would see them: `~`, `$HOME`, `.`, `..` and `cd` earlier in
//!   the line (`cd / && rm -rf *`), so `rm -rf /..` or `rm -rf ../..` from the workspace are
//!   recognised for what they delete;
//! - what is refused: recursive removal, `chmod -R`/`chown -R`, `mv` or `rsync --delete` of `/`,
//!   a system directory, the home directory or a folder that holds the workspace; `find` over
//!   one of those with `-delete` or `-exec rm`; formatting, wiping or writing to a disk
//!   (`mkfs`, `dd of=/dev/sda`, `> /dev/sda`, `tee /dev/nvme0n1`, `shred /dev/sdb`); writing to
//!   `/proc/sysrq-trigger`; killing every process (`kill -9 -1`) or init; stopping or restarting
//!   the machine; and fork bombs, as functions of any name or as `:(){ :|:& };:`.
//!
//! Anyone who wants past it can get past it (a script file, `base64 -d | sh`, a variable holding
//! the command name); that is why the shell also runs with resource limits and without secrets
//! in its environment, and why none of this is called a sandbox.

use std::path::{Component, Path, PathBuf};

/// Nesting of `bash -c '...'` / `eval` followed before giving up (and refusing).
const MAX_DEPTH: usize = 4;

/// Longest command checked; a longer one is refused (the checks are not meant for programs:
/// write those to a file).
pub const MAX_COMMAND_CHARS: usize = 100_000;

/// Directories whose removal, move or recursive permission change breaks the system.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
    "/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var", "/snap", "/mnt", "/media",
];

/// Devices a command must not write to: disks and partitions, and raw memory.
const DISK_PREFIXES: &[&str] = &[
    "/dev/sd",
    "/dev/hd",
    "/dev/vd",
    "/dev/xvd",
    "/dev/nvme",
    "/dev/mmcblk",
    "/dev/disk/",
    "/dev/dm-",
    "/dev/mapper/",
    "/dev/md",
    "/dev/loop",
    "/dev/sr",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
];

/// Why `command` is refused, or `None` when it is not on the list. Relative paths are taken
/// as relative to an unknown directory.
pub fn check(command: &str) -> Option<String> {
    Checker::new(None).check_script(command, 0)
}

/// [`check`] for a command that starts in `workspace`: relative paths (`..`, `*` after `cd /`)
/// are resolved from there, and the folders that hold the workspace count as protected.
pub fn check_in(command: &str, workspace: &Path) -> Option<String> {
    Checker::new(Some(workspace)).check_script(command, 0)
}

/// What the checker knows about where a command runs.
struct Checker {
    /// The home directory (`~`, `$HOME`); a stand-in path when HOME is not set, so `~` still
    /// counts as the home directory.
    home: PathBuf,
    /// The workspace the command starts in, when known.
    workspace: Option<PathBuf>,
}

/// Where the shell is, as far as the line tells.
#[derive(Clone)]
enum Cwd {
    /// A known directory.
    At(PathBuf),
    /// Somewhere we cannot tell (`cd "$X"`, or no workspace given).
    Unknown,
}

impl Checker {
    fn new(workspace: Option<&Path>) -> Self {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute() && h != Path::new("/"))
            .unwrap_or_else(|| PathBuf::from("/~"));
        Self {
            home,
            workspace: workspace.map(Path::to_path_buf),
        }
    }

    fn start(&self) -> Cwd {
        match &self.workspace {
            Some(dir) => Cwd::At(dir.clone()),
            None => Cwd::Unknown,
        }
    }

    /// Checks a whole script (a command line, or the text given to `bash -c`).
    fn check_script(&self, script: &str, depth: usize) -> Option<String> {
        if depth > MAX_DEPTH {
            return Some("it nests shells too deeply to check".to_string());
        }
        if script.chars().count() > MAX_COMMAND_CHARS {
            return Some(format!(
                "it is longer than {MAX_COMMAND_CHARS} characters, too long to check; write it \
                 to a script file and run that"
            ));
        }
        let tokens = lex(script);
        if let Some(name) = fork_bomb(&tokens) {
            return Some(format!(
                "it is a fork bomb (the function `{name}` starts copies of itself)"
            ));
        }
        let mut cwd = self.start();
        for pipeline in pipelines(&tokens) {
            let mut previous: Option<&Simple> = None;
            for command in &pipeline {
                if let Some(reason) = self.check_simple(command, previous, &mut cwd, depth) {
                    return Some(reason);
                }
                previous = Some(command);
            }
        }
        None
    }

    fn check_simple(
        &self,
        command: &Simple,
        previous: Option<&Simple>,
        cwd: &mut Cwd,
        depth: usize,
    ) -> Option<String> {
        for target in &command.writes {
            if let Some(reason) = self.forbidden_write(target, cwd, "redirecting output to") {
                return Some(reason);
            }
        }
        let peeled = peel(&command.words);
        if let Some(script) = peeled.script {
            return self.check_script(&script, depth + 1);
        }
        let words = peeled.words;
        let (program, args) = words.split_first()?;
        let name = base_name(program);
        // Text this command reads on standard input: a here-string or here-document, or what an
        // `echo` / `printf` before it in the pipeline prints.
        let stdin = command.stdin.clone().or_else(|| previous.and_then(echoed));
        match name.as_str() {
            "cd" | "pushd" => {
                *cwd = self.change_dir(args.iter().find(|a| !a.starts_with('-')), cwd);
                None
            }
            "rm" => {
                if args.iter().any(|a| a == "--no-preserve-root") {
                    return Some(
                        "`rm --no-preserve-root` deletes the whole file system".to_string(),
                    );
                }
                let recursive = args.iter().any(|a| {
                    a == "--recursive"
                        || (is_short_flags(a) && (a.contains('r') || a.contains('R')))
                });
                if !recursive {
                    return None;
                }
                let mut targets: Vec<String> = operands(args).cloned().collect();
                if peeled.from_xargs {
                    targets.extend(
                        stdin
                            .iter()
                            .flat_map(|t| t.split_whitespace().map(str::to_string)),
                    );
                }
                self.protected_among(targets.iter(), cwd)
                    .map(|(target, what)| format!("`rm -r {target}` deletes {what}"))
            }
            "chmod" | "chown" | "chgrp" => {
                let recursive = args
                    .iter()
                    .any(|a| a == "--recursive" || (is_short_flags(a) && a.contains('R')));
                if !recursive {
                    return None;
                }
                self.protected_among(operands(args), cwd)
                    .map(|(target, what)| format!("`{name} -R` on {target} changes {what}"))
            }
            "mv" => {
                let sources: Vec<&String> = operands(args).collect();
                let sources = sources.split_last().map(|(_, s)| s).unwrap_or(&[]);
                self.protected_among(sources.iter().copied(), cwd)
                    .map(|(target, what)| format!("`mv {target}` moves {what} away"))
            }
            "rsync" if args.iter().any(|a| a.starts_with("--delete")) => {
                let destination = operands(args).last()?;
                self.protected(destination, cwd).map(|what| {
                    format!("`rsync --delete` into {destination} deletes what is in {what}")
                })
            }
            "find" => self.check_find(args, cwd, depth),
            "mkfs" | "mke2fs" | "mkswap" | "wipefs" | "blkdiscard" | "sfdisk" | "fdisk"
            | "parted" | "sgdisk" => {
                Some(format!("`{name}` formats, wipes or repartitions a disk"))
            }
            _ if name.starts_with("mkfs.") => Some(format!("`{name}` formats a disk or partition")),
            "dd" => args
                .iter()
                .filter_map(|a| a.strip_prefix("of="))
                .find_map(|target| {
                    self.forbidden_target(target, cwd)
                        .map(|what| format!("`dd of={target}` {what}"))
                }),
            "tee" | "cp" | "shred" | "truncate" | "install" => {
                let targets: Vec<&String> = operands(args).collect();
                let written: Vec<&String> = match name.as_str() {
                    // cp and install write only their last operand.
                    "cp" | "install" => targets.last().copied().into_iter().collect(),
                    _ => targets,
                };
                written
                    .into_iter()
                    .find_map(|t| self.forbidden_write(t, cwd, &format!("`{name}` to")))
            }
            "shutdown" | "reboot" | "halt" | "poweroff" | "kexec" => {
                Some(format!("`{name}` stops or restarts the machine"))
            }
            "init" | "telinit" if args.first().is_some_and(|a| a == "0" || a == "6") => Some(
                format!("`{name} {}` stops or restarts the machine", args[0]),
            ),
            "systemctl"
                if args.iter().any(|a| {
                    matches!(
                        a.as_str(),
                        "poweroff" | "reboot" | "halt" | "kexec" | "emergency" | "rescue"
                    )
                }) =>
            {
                Some("`systemctl` would stop or restart the machine".to_string())
            }
            "kill" => kills_everything(args)
                .map(|pid| format!("`kill {pid}` kills every process (or init)")),
            "killall5" => Some("`killall5` kills every process".to_string()),
            "bash" | "sh" | "zsh" | "dash" | "ksh" | "ash" | "mksh" | "yash" | "fish" => {
                // No -c: the script comes from a file we cannot see, or from standard input.
                match (args.iter().find(|a| !a.starts_with(['-', '+'])), stdin) {
                    (None, Some(script)) => self.check_script(&script, depth + 1),
                    _ => None,
                }
            }
            "eval" => self.check_script(&args.join(" "), depth + 1),
            _ => None,
        }
    }

    /// `find DIR ... -delete` or `-exec rm ...` over a protected directory; and whatever
    /// `-exec` runs, checked as a command of its own.
    fn check_find(&self, args: &[String], cwd: &Cwd, depth: usize) -> Option<String> {
        // -H, -L, -P, -D LIST and -O LEVEL come before the start directories.
        let mut leading = args.iter().peekable();
        while let Some(option) = leading.peek() {
            match option.as_str() {
                "-H" | "-L" | "-P" => {
                    leading.next();
                }
                "-D" => {
                    leading.next();
                    leading.next();
                }
                o if o.starts_with("-O") => {
                    leading.next();
                }
                _ => break,
            }
        }
        let starts: Vec<&String> = leading
            .take_while(|a| !a.starts_with('-') && *a != "(" && *a != "!")
            .collect();
        let mut executed: Vec<Vec<String>> = Vec::new();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if matches!(arg.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                let words: Vec<String> = rest
                    .by_ref()
                    .take_while(|w| *w != ";" && *w != "+")
                    .cloned()
                    .collect();
                executed.push(words);
            }
        }
        let deletes = args.iter().any(|a| a == "-delete")
            || executed.iter().any(|words| {
                let peeled = peel(words);
                peeled.script.is_some()
                    || peeled.words.first().is_some_and(|p| {
                        matches!(
                            base_name(p).as_str(),
                            "rm" | "shred" | "unlink" | "rmdir" | "chmod" | "chown" | "mv"
                        )
                    })
            });
        if deletes && let Some((target, what)) = self.protected_among(starts.into_iter(), cwd) {
            return Some(format!(
                "`find {target}` with -delete or -exec changes {what}"
            ));
        }
        // What -exec runs, with {} standing for the start directories.
        for words in executed {
            let command = Simple {
                words,
                ..Simple::default()
            };
            let mut here = cwd.clone();
            if let Some(reason) = self.check_simple(&command, None, &mut here, depth + 1) {
                return Some(reason);
            }
        }
        None
    }

    fn change_dir(&self, target: Option<&String>, cwd: &Cwd) -> Cwd {
        match target {
            None => Cwd::At(self.home.clone()),
            Some(dir) if dir == "-" => Cwd::Unknown,
            Some(dir) => self.resolve(dir, cwd).map_or(Cwd::Unknown, Cwd::At),
        }
    }

    /// The first of `targets` that names something protected, with what it is.
    fn protected_among<'a>(
        &self,
        targets: impl Iterator<Item = &'a String>,
        cwd: &Cwd,
    ) -> Option<(String, &'static str)> {
        for target in targets {
            if let Some(what) = self.protected(target, cwd) {
                return Some((target.clone(), what));
            }
        }
        None
    }

    /// What `target` deletes when removed, if it is protected: the whole file system, the home
    /// directory, a system directory, or a folder holding the workspace. A pattern directly in
    /// one of those (`/*`, `/e*`, `/usr/*`) counts as that folder.
    fn protected(&self, target: &str, cwd: &Cwd) -> Option<&'static str> {
        if let Some(rest) = target.strip_prefix('~')
            && !rest.is_empty()
            && !rest.starts_with('/')
        {
            // ~user: someone's home directory.
            return Some("a home directory");
        }
        let path = self.resolve(target, cwd)?;
        let folder = match path.file_name().map(|n| n.to_string_lossy()) {
            Some(name) if is_pattern(&name) => path.parent().map(Path::to_path_buf)?,
            _ => path,
        };
        self.describe(&folder)
    }

    fn describe(&self, folder: &Path) -> Option<&'static str> {
        if folder == Path::new("/") {
            return Some("the whole file system");
        }
        if self.home == folder {
            return Some("the home directory");
        }
        if SYSTEM_DIRS.iter().any(|d| folder == Path::new(d)) {
            return Some("a system directory");
        }
        if self
            .workspace
            .as_deref()
            .is_some_and(|ws| ws.starts_with(folder) && ws != folder)
        {
            return Some("the folder holding the workspace (and engram's own data)");
        }
        if self.home.starts_with(folder) {
            return Some("the folder holding the home directory");
        }
        None
    }

    /// Refuses writing to a disk, raw memory or the sysrq trigger: `how` says how it is
    /// written (`redirecting output to`, `` `tee` to ``).
    fn forbidden_write(&self, target: &str, cwd: &Cwd, how: &str) -> Option<String> {
        self.forbidden_target(target, cwd)
            .map(|what| format!("{how} {target} {what}"))
    }

    /// What writing to `target` would do, when it is forbidden.
    fn forbidden_target(&self, target: &str, cwd: &Cwd) -> Option<&'static str> {
        let path = self.resolve(target, cwd)?;
        let text = path.to_string_lossy();
        if text == "/proc/sysrq-trigger" {
            return Some("triggers kernel actions (crash, reboot, kill every process)");
        }
        if DISK_PREFIXES.iter().any(|p| text.starts_with(p)) {
            return Some("overwrites a disk or the system's memory");
        }
        None
    }

    /// The absolute path `word` names, resolved lexically (`~`, `$HOME`, `.`, `..`, the
    /// current directory); `None` when it depends on something we cannot know.
    fn resolve(&self, word: &str, cwd: &Cwd) -> Option<PathBuf> {
        let expanded: PathBuf = if word == "~" || word.starts_with("~/") {
            self.home
                .join(word.trim_start_matches('~').trim_start_matches('/'))
        } else if let Some(rest) = word
            .strip_prefix("${HOME}")
            .or_else(|| word.strip_prefix("$HOME"))
        {
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            self.home.join(rest.trim_start_matches('/'))
        } else if word.contains('$') || word.contains('`') {
            return None;
        } else if word.starts_with('/') {
            PathBuf::from(word)
        } else {
            match cwd {
                Cwd::At(dir) => dir.join(word),
                Cwd::Unknown => return None,
            }
        };
        let mut resolved = PathBuf::from("/");
        for component in expanded.components() {
            match component {
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::Normal(name) => resolved.push(name),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        Some(resolved)
    }
}

/// `-1` (every process) or `1` (init) among the pids `kill` is given.
fn kills_everything(args: &[String]) -> Option<String> {
    let mut rest = args.iter().peekable();
    // A first argument `-9` / `-KILL` / `-s KILL` / `-n 9` is the signal, not a pid.
    if let Some(first) = rest.peek() {
        if matches!(first.as_str(), "-s" | "-n") {
            rest.next();
            rest.next();
        } else if first.starts_with('-') && first.as_str() != "-1" && first.as_str() != "--" {
            rest.next();
        } else if first.as_str() == "-1" && args.len() > 1 {
            // `kill -1 PID` sends signal 1 (HUP) to PID.
            rest.next();
        }
    }
    rest.filter(|a| a.as_str() != "--")
        .find(|pid| matches!(pid.as_str(), "-1" | "1"))
        .cloned()
}

/// The command's operands: its arguments that are not options.
fn operands(args: &[String]) -> impl Iterator<Item = &String> {
    let mut after_dashes = false;
    args.iter().filter(move |a| {
        if after_dashes {
            return true;
        }
        if a.as_str() == "--" {
            after_dashes = true;
            return false;
        }
        !a.starts_with('-') || a.as_str() == "-"
    })
}

fn is_short_flags(arg: &str) -> bool {
    arg.len() > 1 && arg.starts_with('-') && !arg.starts_with("--")
}

/// A glob or brace pattern (`*`, `e?c`, `[a-z]*`, `{usr,etc}`) that may name several entries.
fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?', '[', '{'])
}

fn base_name(program: &str) -> String {
    Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_string())
}

/// The text an `echo` or `printf` prints (roughly), for what is piped into the next command.
fn echoed(command: &Simple) -> Option<String> {
    let peeled = peel(&command.words);
    let (program, args) = peeled.words.split_first()?;
    match base_name(program).as_str() {
        "echo" | "printf" => Some(
            args.iter()
                .filter(|a| !is_short_flags(a))
                .map(|a| a.replace("\\n", "\n"))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => command.stdin.clone(),
    }
}

/// A simple command with its wrappers taken off.
struct Peeled {
    /// The command that really runs, with its arguments.
    words: Vec<String>,
    /// A script a wrapper runs (`bash -c SCRIPT`, `su -c`, `env -S`).
    script: Option<String>,
    /// Whether `xargs` adds arguments from standard input.
    from_xargs: bool,
}

/// Takes off leading assignments (`FOO=1`), shell keywords (`then`, `do`, `!`), and wrappers
/// that run the rest as a command (`sudo`, `env`, `nohup`, `timeout 10`, `busybox`, `xargs`, ...)
/// with their options; a shell given `-c` yields its script.
fn peel(words: &[String]) -> Peeled {
    let mut rest = words;
    let mut from_xargs = false;
    while let Some((first, tail)) = rest.split_first() {
        let word = first.as_str();
        let is_assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment
            || matches!(
                word,
                "then" | "do" | "else" | "elif" | "if" | "while" | "until" | "!" | "coproc"
            )
        {
            rest = tail;
            continue;
        }
        let name = base_name(word);
        // Options that take a value as the next word, per wrapper.
        let valued: &[&str] = match name.as_str() {
            "sudo" => &[
                "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "-R",
            ],
            "doas" => &["-u", "-C"],
            "env" => &["-u", "--unset", "-C", "--chdir"],
            "timeout" => &["-s", "--signal", "-k", "--kill-after"],
            "nice" => &["-n", "--adjustment"],
            "ionice" => &["-c", "-n", "-p", "-P", "-u"],
            "xargs" => &[
                "-I",
                "-n",
                "-P",
                "-d",
                "-a",
                "-E",
                "-L",
                "-s",
                "--delimiter",
                "--arg-file",
                "--max-args",
                "--max-procs",
                "--replace",
            ],
            "watch" => &["-n", "--interval", "-d"],
            "strace" | "ltrace" => &["-o", "-e", "-p", "-s", "-u", "-E"],
            "chrt" | "taskset" | "stdbuf" | "setsid" | "nohup" | "command" | "builtin" | "exec"
            | "busybox" | "toybox" | "nocache" | "unbuffer" | "flock" | "chroot" | "unshare"
            | "catchsegv" | "runuser" | "su" | "script" | "time" => &[],
            _ => break,
        };
        // Shell-like wrappers whose -c takes a command line.
        if matches!(name.as_str(), "su" | "runuser" | "script")
            && let Some(at) = tail.iter().position(|a| a == "-c" || a == "--command")
        {
            return Peeled {
                words: Vec::new(),
                script: tail.get(at + 1).cloned(),
                from_xargs,
            };
        }
        if name == "su" || name == "runuser" || name == "script" {
            // Without -c, an interactive shell: nothing to check.
            return Peeled {
                words: Vec::new(),
                script: None,
                from_xargs,
            };
        }
        from_xargs |= name == "xargs";
        rest = tail;
        // Options, with their values.
        while let Some((option, after)) = rest.split_first() {
            if option == "--" {
                rest = after;
                break;
            }
            if !option.starts_with('-') || option.len() == 1 {
                break;
            }
            if name == "env" && (option == "-S" || option == "--split-string") {
                return Peeled {
                    words: Vec::new(),
                    script: after.first().cloned(),
                    from_xargs,
                };
            }
            if let Some(script) = option
                .strip_prefix("-S")
                .filter(|s| name == "env" && !s.is_empty())
            {
                return Peeled {
                    words: Vec::new(),
                    script: Some(script.to_string()),
                    from_xargs,
                };
            }
            rest = if valued.contains(&option.as_str()) {
                after.get(1..).unwrap_or(&[])
            } else {
                after
            };
        }
        // Operands some wrappers take before the command.
        let leading = match name.as_str() {
            "timeout" | "flock" | "chroot" | "taskset" | "chrt" => 1,
            _ => 0,
        };
        rest = rest.get(leading..).unwrap_or(&[]);
    }
    if let Some((program, args)) = rest.split_first()
        && matches!(
            base_name(program).as_str(),
            "bash" | "sh" | "zsh" | "dash" | "ksh" | "ash" | "mksh" | "yash" | "fish"
        )
        && let Some(script) = shell_script(args)
    {
        return Peeled {
            words: Vec::new(),
            script: Some(script),
            from_xargs,
        };
    }
    Peeled {
        words: rest.to_vec(),
        script: None,
        from_xargs,
    }
}

/// The script of `bash [options] -c SCRIPT ...`: `-c` may come in a cluster (`-lc`, `-ec`) and
/// anywhere among the options; the script is the first operand after them.
fn shell_script(args: &[String]) -> Option<String> {
    let mut has_c = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            return if has_c { rest.next().cloned() } else { None };
        }
        if let Some(long) = arg.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                rest.next();
            }
            continue;
        }
        if (arg.starts_with('-') || arg.starts_with('+')) && arg.len() > 1 {
            let flags = &arg[1..];
            if flags.contains('c') {
                has_c = true;
            }
            if flags.contains('o') || flags.contains('O') {
                rest.next();
            }
            continue;
        }
        return if has_c { Some(arg.clone()) } else { None };
    }
    None
}

/// One piece of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word, quotes removed.
    Word(String),
    /// `;`, `&`, `&&`, `||`, a newline, `(`, `)`, `{`, `}`, `$(`, a backtick: ends a command.
    End(&'static str),
    /// `|`: the next command reads this one's output.
    Pipe,
    /// An output redirection; its target is the next word.
    WriteTo,
    /// An input redirection from a file (`<`); its source is the next word.
    ReadFrom,
    /// A here-string or here-document: the text the command reads.
    Stdin(String),
}

/// A simple command as the checker sees it.
#[derive(Debug, Default, Clone)]
struct Simple {
    words: Vec<String>,
    /// Files its output is redirected to.
    writes: Vec<String>,
    /// Text it reads on standard input (here-string, here-document).
    stdin: Option<String>,
}

/// Splits tokens into pipelines of simple commands.
fn pipelines(tokens: &[Token]) -> Vec<Vec<Simple>> {
    let mut pipelines = Vec::new();
    let mut pipeline: Vec<Simple> = Vec::new();
    let mut current = Simple::default();
    let mut tokens = tokens.iter().peekable();
    let finish = |current: &mut Simple, pipeline: &mut Vec<Simple>| {
        let simple = std::mem::take(current);
        if !simple.words.is_empty() || !simple.writes.is_empty() {
            pipeline.push(simple);
        }
    };
    while let Some(token) = tokens.next() {
        match token {
            Token::Word(word) => current.words.push(word.clone()),
            Token::WriteTo => {
                if let Some(Token::Word(target)) = tokens.peek() {
                    current.writes.push(target.clone());
                    tokens.next();
                }
            }
            Token::ReadFrom => {
                if let Some(Token::Word(_)) = tokens.peek() {
                    tokens.next();
                }
            }
            Token::Stdin(text) => current.stdin = Some(text.clone()),
            Token::Pipe => finish(&mut current, &mut pipeline),
            Token::End(_) => {
                finish(&mut current, &mut pipeline);
                if !pipeline.is_empty() {
                    pipelines.push(std::mem::take(&mut pipeline));
                }
            }
        }
    }
    finish(&mut current, &mut pipeline);
    if !pipeline.is_empty() {
        pipelines.push(pipeline);
    }
    pipelines
}

/// The name of a function defined in `tokens` that starts copies of itself (more than one, or
/// one in the background or a pipe): `:(){ :|:& };:`, `bomb() { bomb | bomb & }; bomb`,
/// `function f { f & f; }`.
fn fork_bomb(tokens: &[Token]) -> Option<String> {
    // Where each `{` closes (one pass with a stack).
    let mut closing = vec![tokens.len(); tokens.len()];
    let mut open = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        match token {
            Token::End("{") => open.push(index),
            Token::End("}") => {
                if let Some(start) = open.pop() {
                    closing[start] = index;
                }
            }
            _ => {}
        }
    }
    // Every word that starts a command, by word, and every `|` and `&`, by position (sorted),
    // so each function's body is looked at in logarithmic time however they nest.
    let mut starts_by_name: std::collections::HashMap<&str, Vec<usize>> =
        std::collections::HashMap::new();
    let mut spawners = Vec::new();
    let mut at_start = true;
    for (index, token) in tokens.iter().enumerate() {
        match token {
            Token::Word(word) => {
                if at_start {
                    starts_by_name.entry(word.as_str()).or_default().push(index);
                }
                at_start = false;
            }
            Token::Pipe | Token::End("&") => {
                spawners.push(index);
                at_start = true;
            }
            Token::End(_) => at_start = true,
            _ => {}
        }
    }
    for start in 0..tokens.len() {
        let (name, brace) = match &tokens[start..] {
            [
                Token::Word(name),
                Token::End("("),
                Token::End(")"),
                Token::End("{"),
                ..,
            ] => (name, start + 3),
            [
                Token::Word(keyword),
                Token::Word(name),
                Token::End("("),
                Token::End(")"),
                Token::End("{"),
                ..,
            ] if keyword == "function" => (name, start + 4),
            [Token::Word(keyword), Token::Word(name), Token::End("{"), ..]
                if keyword == "function" =>
            {
                (name, start + 2)
            }
            _ => continue,
        };
        let body = brace + 1..closing[brace].min(tokens.len());
        // Calls: the name where a command starts, inside the body.
        let calls = starts_by_name.get(name.as_str()).map_or(0, |at| {
            at.partition_point(|&i| i < body.end) - at.partition_point(|&i| i < body.start)
        });
        let spawns = spawners.partition_point(|&i| i < body.end)
            > spawners.partition_point(|&i| i < body.start);
        if calls >= 2 || (calls >= 1 && spawns) {
            return Some(name.clone());
        }
    }
    None
}

/// Reads a command line into tokens, roughly as bash does: quotes and escapes removed,
/// operators split off, redirections noted, here-strings and here-documents kept as the text a
/// command reads.
fn lex(line: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        chars: line.chars().collect(),
        at: 0,
        tokens: Vec::new(),
        word: String::new(),
        in_word: false,
        quoted: false,
        here_string_next: false,
        here_documents: Vec::new(),
    };
    lexer.run();
    lexer.tokens
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    tokens: Vec<Token>,
    word: String,
    in_word: bool,
    /// Whether any part of the current word was quoted or escaped (`"{"` is not a brace).
    quoted: bool,
    /// The next word is a here-string's text.
    here_string_next: bool,
    /// Here-documents whose text starts on the next line: (delimiter, token index).
    here_documents: Vec<(String, usize)>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        let token = if self.here_string_next {
            self.here_string_next = false;
            Token::Stdin(word)
        } else if !self.quoted && (word == "{" || word == "}") {
            Token::End(if word == "{" { "{" } else { "}" })
        } else {
            Token::Word(word)
        };
        self.tokens.push(token);
        self.in_word = false;
        self.quoted = false;
    }

    /// Ends the current word and adds an operator.
    fn operator(&mut self, token: Token, length: usize) {
        self.end_word();
        self.tokens.push(token);
        self.at += length;
    }

    /// Whether the current word is a file descriptor number (`2` in `2>`), which is dropped.
    fn drop_descriptor(&mut self) {
        if self.in_word && !self.quoted && self.word.chars().all(|d| d.is_ascii_digit()) {
            self.word.clear();
            self.in_word = false;
        }
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            match c {
                '\'' => {
                    self.in_word = true;
                    self.quoted = true;
                    self.at += 1;
                    while let Some(q) = self.peek(0) {
                        self.at += 1;
                        if q == '\'' {
                            break;
                        }
                        self.word.push(q);
                    }
                }
                '"' => {
                    self.in_word = true;
                    self.quoted = true;
                    self.at += 1;
                    while let Some(q) = self.peek(0) {
                        self.at += 1;
                        match q {
                            '"' => break,
                            '\\' => {
                                if let Some(escaped) = self.peek(0) {
                                    self.word.push(escaped);
                                    self.at += 1;
                                }
                            }
                            _ => self.word.push(q),
                        }
                    }
                }
                '\\' => {
                    match self.peek(1) {
                        // A line continuation.
                        Some('\n') => {}
                        Some(escaped) => {
                            self.in_word = true;
                            self.quoted = true;
                            self.word.push(escaped);
                        }
                        None => {}
                    }
                    self.at += 2;
                }
                '$' if self.peek(1) == Some('{') => {
                    self.in_word = true;
                    while let Some(q) = self.peek(0) {
                        self.word.push(q);
                        self.at += 1;
                        if q == '}' {
                            break;
                        }
                    }
                }
                '$' if self.peek(1) == Some('(') => self.operator(Token::End("$("), 2),
                '#' if !self.in_word => {
                    // A comment, to the end of the line.
                    while self.peek(0).is_some_and(|q| q != '\n') {
                        self.at += 1;
                    }
                }
                '\n' => {
                    self.operator(Token::End("\n"), 1);
                    self.read_here_documents();
                }
                ';' => self.operator(Token::End(";"), 1),
                '(' => self.operator(Token::End("("), 1),
                ')' => self.operator(Token::End(")"), 1),
                '`' => self.operator(Token::End("`"), 1),
                '&' => match self.peek(1) {
                    Some('&') => self.operator(Token::End("&&"), 2),
                    Some('>') => {
                        let length = if self.peek(2) == Some('>') { 3 } else { 2 };
                        self.operator(Token::WriteTo, length);
                    }
                    _ => self.operator(Token::End("&"), 1),
                },
                '|' => match self.peek(1) {
                    Some('|') => self.operator(Token::End("||"), 2),
                    Some('&') => self.operator(Token::Pipe, 2),
                    _ => self.operator(Token::Pipe, 1),
                },
                '>' => {
                    self.drop_descriptor();
                    self.end_word();
                    let mut length = 1;
                    if matches!(self.peek(1), Some('>') | Some('|')) {
                        length += 1;
                    }
                    if self.peek(length) == Some('&') {
                        // `>&2`, `>&-`: another descriptor, not a file.
                        let target: String = self.chars[self.at + length + 1..]
                            .iter()
                            .take_while(|c| !c.is_whitespace())
                            .collect();
                        if !target.is_empty()
                            && target.chars().all(|d| d.is_ascii_digit() || d == '-')
                        {
                            self.at += length + 1 + target.chars().count();
                            continue;
                        }
                        length += 1;
                    }
                    self.operator(Token::WriteTo, length);
                }
                '<' => {
                    self.drop_descriptor();
                    self.end_word();
                    match (self.peek(1), self.peek(2)) {
                        (Some('<'), Some('<')) => {
                            // A here-string: the next word is the text.
                            self.here_string_next = true;
                            self.at += 3;
                        }
                        (Some('<'), _) => self.here_document(),
                        (Some('('), _) => self.operator(Token::End("("), 2),
                        (Some('&'), _) => self.at += 2,
                        _ => self.operator(Token::ReadFrom, 1),
                    }
                }
                c if c.is_whitespace() => {
                    self.end_word();
                    self.at += 1;
                }
                c => {
                    self.in_word = true;
                    self.word.push(c);
                    self.at += 1;
                }
            }
        }
        self.end_word();
        // A here-string or here-document left without its text reads nothing.
        self.here_string_next = false;
    }

    /// `<<DELIM` (or `<<-DELIM`, `<<'DELIM'`): notes the delimiter; the text follows the line.
    fn here_document(&mut self) {
        self.at += 2;
        if self.peek(0) == Some('-') {
            self.at += 1;
        }
        while self.peek(0).is_some_and(|c| c == ' ' || c == '\t') {
            self.at += 1;
        }
        let mut delimiter = String::new();
        while let Some(c) = self.peek(0) {
            if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>' | '(' | ')') {
                break;
            }
            if !matches!(c, '\'' | '"' | '\\') {
                delimiter.push(c);
            }
            self.at += 1;
        }
        let index = self.tokens.len();
        self.here_documents.push((delimiter, index));
    }

    /// After a newline: the text of each here-document begun on the line just ended, up to its
    /// delimiter line (or the end of the input).
    fn read_here_documents(&mut self) {
        let pending = std::mem::take(&mut self.here_documents);
        for (inserted, (delimiter, index)) in pending.into_iter().enumerate() {
            let mut text = String::new();
            while self.at < self.chars.len() {
                let end = self.chars[self.at..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(self.chars.len(), |n| self.at + n);
                let line: String = self.chars[self.at..end].iter().collect();
                self.at = (end + 1).min(self.chars.len());
                if line.trim_start_matches('\t') == delimiter {
                    break;
                }
                text.push_str(&line);
                text.push('\n');
            }
            // Each text goes right after the command that reads it (earlier insertions shift
            // the later indexes by one each).
            let at = (index + inserted).min(self.tokens.len());
            self.tokens.insert(at, Token::Stdin(text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A workspace under a home directory, as engram's default is (`~/.engram/workspace`).
    fn checker() -> Checker {
        Checker {
            home: PathBuf::from("/home/me"),
            workspace: Some(PathBuf::from("/home/me/.engram/workspace")),
        }
    }

    fn refused(command: &str) -> Option<String> {
        checker().check_script(command, 0)
    }

    #[test]
    fn disasters_are_refused() {
        for command in [
            "rm -rf /",
            "rm -rf /*",
            "rm -fr ~",
            "rm -rf ~/",
            "rm -r -f $HOME",
            "rm -Rf \"${HOME}\"",
            "rm --recursive --force /usr",
            "rm -rf --no-preserve-root /",
            "sudo rm -rf /",
            "sudo -u root rm -rf /",
            "timeout -s KILL 10 rm -rf ~",
            "nice -n 10 rm -rf /",
            "cd /tmp && rm -rf / ; echo done",
            "echo $(rm -rf ~)",
            "bash -c 'rm -rf /'",
            "sh -c \"sudo rm -rf ~\"",
            "eval rm -rf /",
            "FOO=1 rm -rf //",
            "/bin/rm -rf /etc/",
            "mkfs.ext4 /dev/sda1",
            "mkfs -t ext4 /dev/sdb",
            "dd if=/dev/zero of=/dev/sda bs=1M",
            "echo x > /dev/sda",
            "cat img >/dev/nvme0n1",
            ":(){ :|:& };:",
            "bomb() { bomb | bomb & }; bomb",
            "shutdown -h now",
            "sudo reboot",
            "systemctl poweroff",
            "init 0",
            "chmod -R 777 /",
            "chown -R nobody /home",
        ] {
            assert!(check(command).is_some(), "not refused: {command}");
            assert!(
                refused(command).is_some(),
                "not refused in a workspace: {command}"
            );
        }
    }

    #[test]
    fn the_ways_around_the_old_list_are_closed() {
        for command in [
            // Shells with option clusters, login shells, busybox, su.
            "bash -lc 'rm -rf /'",
            "bash -l -c 'rm -rf /'",
            "bash -o pipefail -c 'rm -rf /'",
            "bash --login -c 'rm -rf ~'",
            "sh -ec 'rm -rf /'",
            "busybox rm -rf /",
            "busybox sh -c 'rm -rf /'",
            "su -c 'rm -rf /'",
            "su root -c 'rm -rf /'",
            // env and paths to the programs.
            "/usr/bin/env rm -rf /",
            "env -i rm -rf /",
            "env -u PATH rm -rf /",
            "env -S 'rm -rf /'",
            "/usr/bin/sudo /bin/rm -rf /",
            "command rm -rf /",
            "exec rm -rf /",
            "time rm -rf /",
            "echo / | xargs rm -rf",
            // Paths that lead to / or a system directory.
            "rm -rf /..",
            "rm -rf /tmp/../",
            "rm -rf /usr/./",
            "rm -rf /e*",
            "rm -rf /{usr,etc}",
            "rm -rf ~/..",
            "rm -rf $HOME/*",
            "cd / && rm -rf *",
            "cd /; rm -rf .",
            "cd ~ && rm -rf ./*",
            "cd /usr\nrm -rf *",
            "(cd / && rm -rf *)",
            "cd .. && rm -rf *",
            "rm -rf ..",
            "rm -rf ../..",
            "rm -rf ~root",
            // find, mv, rsync.
            "find / -delete",
            "find / -name '*' -delete",
            "find -L /etc -delete",
            "find / -exec rm -rf {} \\;",
            "find / -exec rm -rf {} +",
            "find . -exec sh -c 'rm -rf /' \\;",
            "mv /usr /tmp/usr",
            "mv ~ /dev/null",
            "rsync -a --delete empty/ /",
            // Killing everything, sysrq, disks.
            "kill -9 -1",
            "kill -KILL -1",
            "kill -s KILL -1",
            "kill -- -1",
            "kill 1",
            "sudo kill -9 1",
            "killall5 -9",
            "echo b > /proc/sysrq-trigger",
            "echo c | sudo tee /proc/sysrq-trigger",
            "echo o >| /proc/sysrq-trigger",
            "cat /dev/zero > /dev/sdb",
            "cat x 1>/dev/sda",
            "cat x &> /dev/sda",
            "cp disk.img /dev/sda",
            "tee /dev/nvme0n1 < img",
            "shred -n 1 /dev/sda",
            "dd if=x of=//dev/../dev/sda",
            "echo x > /dev/mem",
            "wipefs -a /dev/sda",
            // Fork bombs as functions of any name and shape.
            "f(){ f|f& };f",
            "f() { f & f; }; f",
            "function f { f | f & }; f",
            "function boom() { boom & boom; }; boom",
            "x(){ x & }; x",
            ":(){\n  :|:&\n};:",
            // Scripts fed to a shell.
            "bash <<< 'rm -rf /'",
            "echo 'rm -rf /' | bash",
            "printf 'rm -rf ~\\n' | sh",
            "bash <<EOF\nrm -rf /\nEOF\n",
            "sh <<-'END'\n\trm -rf ~\n\tEND",
            // Keywords and nesting.
            "if true; then rm -rf /; fi",
            "while true; do rm -rf /; done",
            "! rm -rf /",
            "sudo bash -c \"eval 'rm -rf /'\"",
        ] {
            let reason = refused(command);
            assert!(reason.is_some(), "not refused: {command:?}");
        }
    }

    #[test]
    fn ordinary_commands_pass() {
        for command in [
            "rm -rf build",
            "rm -rf ./target /tmp/scratch",
            "rm -f /tmp/x",
            "rm -rf ~/project/build",
            "rm -rf node_modules dist",
            "rm -r ~/.cache/pip",
            "ls -la /",
            "echo 'rm -rf /' > notes.txt",
            "grep -r reboot src",
            "dd if=/dev/zero of=disk.img bs=1M count=1",
            "dd if=x of=/dev/null",
            "chmod 755 script.sh",
            "chmod -R u+w ./dist",
            "cargo test 2>/dev/null",
            "cargo build 2>&1 | tail -5",
            "echo hi > /dev/stderr",
            "echo hi >&2",
            "f() { echo hi; }; f",
            "fib() { if [ $1 -le 1 ]; then echo $1; else echo $(( $(fib $(($1-1))) )); fi; }",
            "git commit -m 'shutdown handler'",
            "find . -name '*.pyc' -delete",
            "find /tmp/build -delete",
            "find src -exec grep -l TODO {} +",
            "kill -9 1234",
            "kill -1 1234",
            "kill %1",
            "mv build /tmp/old-build",
            "rsync -a --delete src/ /tmp/mirror/",
            "cd /tmp && rm -rf scratch",
            "cd / && ls",
            "cd /usr && ls *",
            "echo $HOME",
            "cat <<EOF > notes.md\nrm -rf / is a famous disaster\nEOF\n",
            "python3 -c 'print(1)'",
            "bash script.sh",
            "sh -c 'echo hello'",
            "sudo apt-get install -y ripgrep",
            "echo x | tee -a log.txt",
            "xargs -n1 echo < list",
            "time cargo build",
            "systemctl status nginx",
            "echo '{ } ( ) ; & |'",
        ] {
            assert_eq!(refused(command), None, "refused: {command:?}");
        }
    }

    #[test]
    fn reasons_name_the_danger() {
        assert_eq!(
            refused("rm -rf ~").as_deref(),
            Some("`rm -r ~` deletes the home directory")
        );
        assert_eq!(
            refused("rm -rf /").as_deref(),
            Some("`rm -r /` deletes the whole file system")
        );
        assert_eq!(
            refused("rm -rf /..").as_deref(),
            Some("`rm -r /..` deletes the whole file system")
        );
        assert_eq!(
            refused("dd if=a of=/dev/sdb").as_deref(),
            Some("`dd of=/dev/sdb` overwrites a disk or the system's memory")
        );
        assert_eq!(
            refused("rm -rf ..").as_deref(),
            Some("`rm -r ..` deletes the folder holding the workspace (and engram's own data)")
        );
        assert_eq!(
            refused("kill -9 -1").as_deref(),
            Some("`kill -1` kills every process (or init)")
        );
        assert_eq!(
            refused("bomb() { bomb | bomb & }; bomb").as_deref(),
            Some("it is a fork bomb (the function `bomb` starts copies of itself)")
        );
        assert!(
            refused("echo b > /proc/sysrq-trigger")
                .unwrap()
                .contains("triggers kernel actions")
        );
    }

    #[test]
    fn very_long_commands_are_refused_rather_than_checked_slowly() {
        let long = format!("echo {}", "a".repeat(MAX_COMMAND_CHARS));
        assert!(refused(&long).unwrap().contains("too long to check"));
        // Deeply nested function definitions are checked quickly.
        let nested: String = (0..8_000).map(|i| format!("f{i}(){{ ")).collect();
        assert_eq!(refused(&nested), None);
    }

    proptest! {
        // The lexer copes with any text: unbalanced quotes, lone escapes, odd unicode.
        #[test]
        fn any_text_gets_an_answer(command in "\\PC{0,80}") {
            let _ = check(&command);
            let _ = refused(&command);
        }

        // Shell-ish text made of the characters that steer the lexer.
        #[test]
        fn shell_punctuation_gets_an_answer(command in "[a-z/~.*{}()<>|&;$`'\" \\\\\n-]{0,120}") {
            let _ = refused(&command);
        }

        // Prefixing a refused command with harmless commands does not hide it.
        #[test]
        fn a_prefix_does_not_hide_a_disaster(prefix in "[a-z ]{0,20}") {
            let command = format!("{prefix}; rm -rf /");
            prop_assert!(refused(&command).is_some());
        }
    }
}
