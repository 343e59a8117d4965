//! The deny list: shell commands refused because they destroy a machine, not a project.
//!
//! This is a guard rail against a model's mistakes, not a sandbox: the command is split into
//! words roughly the way a shell would (quotes, escapes, `;`, `&&`, `|`, `$(...)`, backticks),
//! and each simple command is matched against a short list of known disasters. Anyone who wants
//! to get past it can (a script file, `base64 -d | sh`, an alias); what it stops is the plain
//! `rm -rf ~` typed by accident.

use std::path::Path;

/// Nesting of `bash -c '...'` / `eval` followed before giving up (and refusing).
const MAX_DEPTH: usize = 4;

/// Directories whose recursive removal or permission change breaks the system or the user.
const PROTECTED: &[&str] = &[
    "/", "~", "$HOME", "${HOME}", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64",
    "/opt", "/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// Block devices a redirection must not write to.
const DISK_PREFIXES: &[&str] = &[
    "/dev/sd",
    "/dev/hd",
    "/dev/vd",
    "/dev/xvd",
    "/dev/nvme",
    "/dev/mmcblk",
    "/dev/disk",
    "/dev/dm-",
    "/dev/mapper/",
];

/// Why `command` is refused, or `None` when it is not on the list.
pub fn check(command: &str) -> Option<String> {
    check_at_depth(command, 0)
}

fn check_at_depth(command: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return Some("it nests shells too deeply to check".to_string());
    }
    if is_fork_bomb(command) {
        return Some("it is a fork bomb (a function that starts copies of itself)".to_string());
    }
    if let Some(reason) = writes_to_disk_device(command) {
        return Some(reason);
    }
    split_commands(command)
        .iter()
        .find_map(|words| check_simple_command(words, depth))
}

fn check_simple_command(words: &[String], depth: usize) -> Option<String> {
    let words = strip_wrappers(words);
    let (program, args) = words.split_first()?;
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.as_str() {
        "rm" => {
            if args.iter().any(|a| a == "--no-preserve-root") {
                return Some("`rm --no-preserve-root` deletes the whole file system".to_string());
            }
            let recursive = args.iter().any(|a| {
                a == "--recursive" || (is_short_flags(a) && (a.contains('r') || a.contains('R')))
            });
            protected_target(args)
                .filter(|_| recursive)
                .map(|target| format!("`rm -r {target}` deletes {}", describe(&target)))
        }
        "chmod" | "chown" | "chgrp" => {
            let recursive = args
                .iter()
                .any(|a| a == "--recursive" || (is_short_flags(a) && a.contains('R')));
            protected_target(args)
                .filter(|_| recursive)
                .map(|target| format!("`{name} -R` on {target} changes {}", describe(&target)))
        }
        "mkfs" | "mke2fs" | "mkswap" | "wipefs" => {
            Some(format!("`{name}` formats or wipes a disk or partition"))
        }
        _ if name.starts_with("mkfs.") => Some(format!("`{name}` formats a disk or partition")),
        "dd" => args
            .iter()
            .filter_map(|a| a.strip_prefix("of="))
            .find(|target| is_device_target(target))
            .map(|target| format!("`dd of={target}` overwrites a device")),
        "shutdown" | "reboot" | "halt" | "poweroff" => {
            Some(format!("`{name}` stops or restarts the machine"))
        }
        "init" | "telinit" if args.first().is_some_and(|a| a == "0" || a == "6") => Some(format!(
            "`{name} {}` stops or restarts the machine",
            args[0]
        )),
        "systemctl"
            if args
                .iter()
                .any(|a| matches!(a.as_str(), "poweroff" | "reboot" | "halt" | "kexec")) =>
        {
            Some("`systemctl` would stop or restart the machine".to_string())
        }
        "bash" | "sh" | "zsh" | "dash" | "ksh" => {
            let script = args.iter().skip_while(|a| a.as_str() != "-c").nth(1)?;
            check_at_depth(script, depth + 1)
        }
        "eval" => check_at_depth(&args.join(" "), depth + 1),
        _ => None,
    }
}

/// Drops leading `VAR=value` assignments and wrappers such as `sudo -u root`, `env`, `nohup`,
/// `timeout 10`, with their options, so the command they run is what gets checked.
fn strip_wrappers(words: &[String]) -> &[String] {
    let mut rest = words;
    let mut after_wrapper = false;
    while let Some((first, tail)) = rest.split_first() {
        let word = first.as_str();
        let is_assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment {
            rest = tail;
        } else if matches!(
            word,
            "sudo"
                | "doas"
                | "env"
                | "nohup"
                | "nice"
                | "time"
                | "command"
                | "exec"
                | "builtin"
                | "xargs"
                | "timeout"
                | "stdbuf"
                | "ionice"
                | "nocache"
        ) {
            after_wrapper = true;
            rest = tail;
        } else if after_wrapper && matches!(word, "-u" | "-g" | "-n" | "-s" | "-k" | "-c" | "-C") {
            // An option with a separate value, e.g. `sudo -u root`, `timeout -s KILL`.
            rest = tail.get(1..).unwrap_or(&[]);
        } else if after_wrapper && (word.starts_with('-') || looks_like_duration(word)) {
            rest = tail;
        } else {
            break;
        }
    }
    rest
}

/// `10`, `2.5`, `30s`, `5m`: the duration argument of `timeout`.
fn looks_like_duration(word: &str) -> bool {
    let digits = word.trim_end_matches(['s', 'm', 'h', 'd']);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
}

fn is_short_flags(arg: &str) -> bool {
    arg.len() > 1 && arg.starts_with('-') && !arg.starts_with("--")
}

/// The first argument naming a protected directory (or everything in it, `dir/*`).
fn protected_target(args: &[String]) -> Option<String> {
    args.iter()
        .filter(|a| !a.starts_with('-'))
        .find(|a| {
            let normalized = normalize_target(a);
            PROTECTED.contains(&normalized.as_str())
        })
        .cloned()
}

/// `//usr/./` -> `/usr`, `/*` -> `/`, `~/` -> `~`, `$HOME/*` -> `$HOME`.
fn normalize_target(arg: &str) -> String {
    let mut text = arg.to_string();
    while let Some(stripped) = text
        .strip_suffix("/*")
        .or_else(|| text.strip_suffix("/."))
        .or_else(|| text.strip_suffix('/'))
    {
        text = stripped.to_string();
    }
    while text.contains("//") {
        text = text.replace("//", "/");
    }
    text = text.replace("/./", "/");
    if text.is_empty() && arg.starts_with('/') {
        return "/".to_string();
    }
    if text == "*" && arg.starts_with('/') {
        return "/".to_string();
    }
    text
}

fn describe(target: &str) -> &'static str {
    match normalize_target(target).as_str() {
        "/" => "the whole file system",
        "~" | "$HOME" | "${HOME}" => "the home directory",
        _ => "a system directory",
    }
}

fn is_device_target(target: &str) -> bool {
    target.starts_with("/dev/")
        && !matches!(
            target,
            "/dev/null" | "/dev/zero" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
        )
}

/// `> /dev/sda` and friends, anywhere in the command.
fn writes_to_disk_device(command: &str) -> Option<String> {
    let mut rest = command;
    while let Some(at) = rest.find('>') {
        let target = rest[at + 1..].trim_start_matches(['>', '|', ' ', '\t']);
        let word: String = target
            .chars()
            .take_while(|c| !c.is_whitespace() && !matches!(c, ';' | '&' | '|' | ')'))
            .collect();
        if DISK_PREFIXES.iter().any(|p| word.starts_with(p)) {
            return Some(format!("redirecting output to {word} overwrites a disk"));
        }
        rest = &rest[at + 1..];
    }
    None
}

/// `:(){ :|:& };:` and the same shape with any function name.
fn is_fork_bomb(command: &str) -> bool {
    let squeezed: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    let mut search = squeezed.as_str();
    while let Some(at) = search.find("(){") {
        let before = &search[..at];
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let body = &search[at + 3..];
        if !name.is_empty()
            && (body.starts_with(&format!("{name}|{name}&"))
                || body.starts_with(&format!("{name}&{name}&"))
                || body.starts_with(&format!("{name}|{name};")))
        {
            return true;
        }
        search = &search[at + 3..];
    }
    false
}

/// Splits a command line into simple commands, each a list of words with quotes removed.
fn split_commands(command: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();

    fn end_word(words: &mut Vec<String>, word: &mut String, in_word: &mut bool) {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    }
    fn end_command(commands: &mut Vec<Vec<String>>, words: &mut Vec<String>) {
        if !words.is_empty() {
            commands.push(std::mem::take(words));
        }
    }

    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(escaped) = chars.next() {
                                word.push(escaped);
                            }
                        }
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(escaped) = chars.next() {
                    word.push(escaped);
                }
            }
            '$' if chars.peek() == Some(&'{') => {
                in_word = true;
                word.push('$');
                for q in chars.by_ref() {
                    word.push(q);
                    if q == '}' {
                        break;
                    }
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                chars.next();
                end_word(&mut words, &mut word, &mut in_word);
                end_command(&mut commands, &mut words);
            }
            ';' | '&' | '|' | '(' | ')' | '`' | '{' | '}' | '\n' => {
                end_word(&mut words, &mut word, &mut in_word);
                end_command(&mut commands, &mut words);
            }
            '<' | '>' => end_word(&mut words, &mut word, &mut in_word),
            c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    end_command(&mut commands, &mut words);
    commands
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        }
    }

    #[test]
    fn ordinary_commands_pass() {
        for command in [
            "rm -rf build",
            "rm -rf ./target /tmp/scratch",
            "rm -f /tmp/x",
            "rm -rf ~/project/build",
            "ls -la /",
            "echo 'rm -rf /' > notes.txt",
            "grep -r reboot src",
            "dd if=/dev/zero of=disk.img bs=1M count=1",
            "dd if=x of=/dev/null",
            "chmod 755 script.sh",
            "chmod -R u+w ./dist",
            "cargo test 2>/dev/null",
            "echo hi > /dev/stderr",
            "f() { echo hi; }; f",
            "git commit -m 'shutdown handler'",
        ] {
            assert_eq!(check(command), None, "refused: {command}");
        }
    }

    #[test]
    fn reasons_name_the_danger() {
        assert_eq!(
            check("rm -rf ~").as_deref(),
            Some("`rm -r ~` deletes the home directory")
        );
        assert_eq!(
            check("rm -rf /").as_deref(),
            Some("`rm -r /` deletes the whole file system")
        );
        assert_eq!(
            check("dd if=a of=/dev/sdb").as_deref(),
            Some("`dd of=/dev/sdb` overwrites a device")
        );
    }

    proptest! {
        // The lexer copes with any text: unbalanced quotes, lone escapes, odd unicode.
        #[test]
        fn any_text_gets_an_answer(command in "\\PC{0,80}") {
            let _ = check(&command);
        }

        // Prefixing a refused command with harmless commands does not hide it.
        #[test]
        fn a_prefix_does_not_hide_a_disaster(prefix in "[a-z ]{0,20}") {
            let command = format!("{prefix}; rm -rf /");
            prop_assert!(check(&command).is_some());
        }
    }
}
