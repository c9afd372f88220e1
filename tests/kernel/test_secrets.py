"""--secret: the value reaches the ranks' environment and nowhere else (cell output, job store, logs, namespace)."""

import pathlib

SECRET = "s3cr3t-Value-9f1b2c"


def test_secret_reaches_ranks_but_not_notebook_store_or_logs(shell, capsys, monkeypatch, dl_session):
    monkeypatch.setenv("JDL_TEST_TOKEN", SECRET)
    code = (
        "%%distribute -n 2 --manual --output all --secret JDL_TEST_TOKEN\n"
        "import os\n"
        "token = os.environ['JDL_TEST_TOKEN']\n"
        "print('the token is', token)\n"
        "length = len(token)\n"
    )
    result = shell.run_cell(code, store_history=False)
    assert result.success, result.error_in_exec
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert SECRET not in text
    assert "[rank 1] the token is [secret JDL_TEST_TOKEN]" in text  # it was there, and redacted
    assert shell.user_ns["length"] == len(SECRET)
    assert "token" not in shell.user_ns  # a name bound to the secret stays on the engines
    job = dl_session.jobs.all()[-1]
    assert job.options["secrets"] == ("JDL_TEST_TOKEN",)
    for path in pathlib.Path(dl_session.store.job_dir(job.id)).rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    # Gone from the engines' environment after the job.
    assert shell.run_cell("%%distribute -n 2 --manual\nimport os\nleft = os.environ.get('JDL_TEST_TOKEN')").success
    assert shell.user_ns["left"] is None


def test_missing_secret_is_a_one_line_error_before_launch(shell, capsys, monkeypatch, dl_session):
    monkeypatch.delenv("JDL_NOT_SET", raising=False)
    before = len(dl_session.jobs.all())
    shell.run_cell("%%distribute -n 2 --secret JDL_NOT_SET\nx = 1", store_history=False)
    err = capsys.readouterr().err
    assert "secret 'JDL_NOT_SET' is neither in the kernel's environment" in err and err.strip().count("\n") == 0
    assert len(dl_session.jobs.all()) == before
