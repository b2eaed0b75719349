"""Branch names and repository URLs (control_plane.inputs.git_rules): the branch rules
agree with the real `git check-ref-format --branch` over hostile and ordinary
names (and over generated ones), and so does the OpenAPI document's pattern."""

import re
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.inputs.git_rules import BRANCH_PATTERN, branch_problem, redact_url, url_problem

ORDINARY = ["main", "master", "17.0", "feature/x", "release-1.2", "saas-17.1", "a@b", "head",
            "a.lockx", "x/HEAD", "HEAD/x", "FETCH_HEAD", "refs/heads/x", "a{b}", "é", "日本",
            "!x", "#1", "a'b", "a;id", ";id", "$(id)", "a|b", "a/-b", "x" * 255, "_", "a+b",
            "v1.0-rc.1", "user@host"]
HOSTILE = ["", "-", "-b", "-oProxyCommand=x", "--upload-pack=touch", "../x", "a..b", "..",
           ".", ".a", "a/.b", "a.", "a/", "/a", "a//b", "x.lock", "a/b.lock", "a.lock/b",
           "@{-1}", "a@{b", "@{", "HEAD", "x y", "a\tb", "a\nb", "a\x7fb", "a~1", "a^",
           "a:b", "a?", "a*", "a[b", "a\\b", "x" * 256, "main\n", " main"]
# Stricter than git, on purpose: `@` (git reads it as HEAD) and Unicode spaces.
STRICTER = ["@", "a\xa0b", "a\u2028b", "a\u3000b", "\ufeffmain", "a\x85b"]


def _git_accepts(name, cwd):
    """`git check-ref-format --branch NAME` outside any repository."""
    return subprocess.run(["git", "check-ref-format", "--branch", name], cwd=cwd,
                          env={"GIT_CEILING_DIRECTORIES": str(cwd), "PATH": "/usr/bin:/bin"},
                          capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    return tmp_path_factory.mktemp("no-repository")


@pytest.mark.parametrize("name", ORDINARY + HOSTILE)
def test_branch_rules_agree_with_git(name, outside):
    if len(name) <= 255:  # git has no length limit; the spec's is 255
        assert _git_accepts(name, outside) == (branch_problem(name) is None), name
    assert (branch_problem(name) is None) == (name in ORDINARY)


@pytest.mark.parametrize("name", ORDINARY + HOSTILE + STRICTER)
def test_the_openapi_pattern_says_the_same(name):
    # JSON Schema patterns are searched; `$` must not take a trailing newline, as
    # ECMAScript's does not, so the check uses the same reading as the validator.
    matched = re.search(BRANCH_PATTERN, name) is not None and not name.endswith("\n")
    assert matched == (branch_problem(name) is None), name


@pytest.mark.parametrize("name", STRICTER)
def test_names_refused_beyond_git(name, outside):
    assert _git_accepts(name, outside) and branch_problem(name) is not None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab/.-@{}~^:?* \\[lockHEAD\t", max_size=12))
def test_generated_names_agree_with_git(tmp_path_factory, name):
    outside = tmp_path_factory.getbasetemp()
    accepted = branch_problem(name) is None
    assert _git_accepts(name, outside) == (accepted or name == "@"), name
    assert (re.search(BRANCH_PATTERN, name) is not None) == accepted, name


@pytest.mark.parametrize("url", [
    "https://github.com/acme/erp.git", "https://git.example.com:8443/group/sub/repo",
    "ssh://git@github.com/acme/erp.git", "ssh://github.com:2222/acme/erp",
    "git@github.com:acme/erp.git", "github.com:acme/erp.git",
    "git@ssh.dev.azure.com:v3/org/project/repo", "https://dev.azure.com/o/p/_git/r%20x",
])
def test_repository_urls_accepted(url):
    assert url_problem(url) is None


@pytest.mark.parametrize("url, why", [
    ("https://user:pass@github.com/a/b.git", "credentials"),
    ("https://ghp_token@github.com/a/b.git", "credentials"),
    ("ssh://git:secret@github.com/a/b.git", "credentials"),
    ("user:pass@github.com:a/b.git", "credentials"),
    ("file:///srv/berth/other-env/addons", "must be"),
    ("/srv/berth/other-env/addons", "must be"),
    ("../other/addons", "must be"),
    ("ext::sh -c touch% /tmp/x", "must be"),
    ("fd::3", "must be"),
    ("http://github.com/a/b.git", "must be"),
    ("git://github.com/a/b.git", "must be"),
    ("-oProxyCommand=x", "'-'"),
    ("--upload-pack=touch /tmp/x", "'-'"),
    ("ssh://-oProxyCommand=x/a", "host"),
    ("-oProxyCommand=x:a/b", "'-'"),
    ("git@-oProxyCommand=x:a/b", "host"),
    ("git@github.com:-a/b", "path"),
    ("https://github.com/", "path"),
    ("https://github.com/a b", "path"),
    ("https://github.com/a?x=1", "query"),
    ("", "empty"),
    ("https://github.com/" + "a" * 2048, "2048"),
])
def test_repository_urls_refused(url, why):
    assert why in (url_problem(url) or ""), url_problem(url)


def test_https_only_where_the_spec_says_so():
    assert url_problem("https://github.com/a/b.git", ssh=False) is None
    for url in ("ssh://git@github.com/a/b.git", "git@github.com:a/b.git"):
        assert "https://host/path" in url_problem(url, ssh=False)


@pytest.mark.parametrize("stored, shown", [
    ("https://user:pass@github.com/a/b.git", "https://github.com/a/b.git"),
    ("https://ghp_token@github.com:8443/a/b.git", "https://github.com:8443/a/b.git"),
    ("ssh://git:pw@github.com/a/b.git", "ssh://github.com/a/b.git"),
    ("ssh://git@github.com/a/b.git", "ssh://git@github.com/a/b.git"),
    ("git@github.com:a/b.git", "git@github.com:a/b.git"),
    ("git:pw@github.com:a/b.git", "github.com:a/b.git"),
    ("https://github.com/a/b.git", "https://github.com/a/b.git"),
    (None, None),
])
def test_stored_urls_are_shown_without_credentials(stored, shown):
    assert redact_url(stored) == shown
