"""A self-contained corpus of secret formats (issue 15): texts that carry a secret, with the part
that must never be stored or shown, and ordinary texts that must survive redaction unchanged.

Every value is made up for these tests (right shape, no real credential); a few are assembled
from pieces so that no scanner mistakes this file for a leak.
"""

PEM_RSA = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9OiZ1BjP5CE/Wm/Rr500P\n"
    "RK+Lh9x5eJPo5CAZ3/ANBE0sTK0ZsDGMak2m1g7SEBnpemRsPemBSPRKZ\n"
    "-----END RSA PRIVATE KEY-----"
)
PEM_OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDoPenSshKeyBodyOnlyForTests0123456789abcdefghij\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
PEM_PKCS8 = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCpkcs8Pkcs8Only\n"
    "-----END PRIVATE KEY-----"
)
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjb3JwdXMiLCJpYXQiOjE1MTYyMzkwMjJ9"
    ".Zq3jwtCorpusSignatureOnly_abcdefghijklmnopq"
)
STRIPE_TAIL = "51HqLyjWDarjtT1zdp7dcCorpusOnlyXYZ0123456789abcdefGHIJ"

# (format, text as the producer sends it, the part that must not be stored or shown)
SECRET_TEXTS: list[tuple[str, str, str]] = [
    ("payment live key", f"charge failed with sk_live_{STRIPE_TAIL}", STRIPE_TAIL),
    ("payment restricted key", f"key rk_live_{STRIPE_TAIL} refused", STRIPE_TAIL),
    ("payment test key", "sk_test_4eC39HqLyjWDarjtT1zdp7dcTEST", "4eC39HqLyjWDarjtT1zdp7dcTEST"),
    ("payment webhook secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwjUPD8ILP"),
    ("PEM RSA private key", f"key file:\n{PEM_RSA}\nend", "MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQ"),
    ("PEM OpenSSH private key", PEM_OPENSSH, "QyNTUxOQAAACDoPenSshKeyBody"),
    ("PEM PKCS8 private key", f"pem={PEM_PKCS8}", "Pkcs8Only"),
    ("redis URL, '/' in password", "redis://:p4ss/w0rd@cache.internal:6379/0", "p4ss/w0rd"),
    ("amqp URL, '@' in password", "amqp://worker:pa@ss9word@rabbit:5672/vhost", "pa@ss9word"),
    ("postgres URL", "dsn postgres://admin:hunter2SecretPw@db.internal:5432/app", "hunter2Secret"),
    ("mongodb+srv URL", "mongodb+srv://app:Mongo%40Pass77@cluster0.example.net/db", "Mongo%40Pass"),
    ("Authorization Bearer", "Authorization: Bearer tvzSecretBearer0123456789", "SecretBearer0123"),
    (
        "Authorization Basic",
        "authorization: Basic Ym9iOnNlY3JldHB3ZDEyMw==",
        "Ym9iOnNlY3JldHB3ZDEy",
    ),
    ("Authorization Token", "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bb", "9944b091"),
    (
        "Authorization Digest",
        'Authorization: Digest username="bob", nonce="dcd98b7102dd2f0e", response="6629fae4939"',
        "6629fae4939",
    ),
    (
        "Authorization AWS4",
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/x, Sig=fe5f80f7",
        "fe5f80f7",
    ),
    (
        "Proxy-Authorization",
        "Proxy-Authorization: Negotiate YIIBpQYGKwYBBQUCoIIBmTCC",
        "YIIBpQYGKwY",
    ),
    (
        "Cookie header",
        "Cookie: sessionid=38afes7a8Cookie; csrftoken=kZx92Cookie",
        "38afes7a8Cookie",
    ),
    (
        "Set-Cookie header",
        "Set-Cookie: sid=31d4d96e407aad42Set; HttpOnly; Secure",
        "31d4d96e407aad42",
    ),
    ("header list in JSON text", 'headers: [["Authorization", "HdrList9x8y7z"]]', "HdrList9x8y7z"),
    (
        "JSON object inside a string",
        'body was {"password": "inJsonPw123", "user": "bob"}',
        "inJsonPw123",
    ),
    (
        "JSON refresh token inside a string",
        '{"refresh_token": "1//0gRefreshTok"}',
        "1//0gRefreshTok",
    ),
    (
        "Slack incoming webhook",
        "posting to https://hooks.slack.com/services/T0CORPUS1/B0CORPUS2/AbCdEfGhIjKlMnOpQrStUvWx",
        "AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    (
        "Discord webhook",
        "https://discord.com/api/webhooks/123456789012345678/CorpusDiscordWebhookToken_abc",
        "CorpusDiscordWebhookToken_abc",
    ),
    (
        "Teams incoming webhook",
        "https://contoso.webhook.office.com/webhookb2/1234-corpus@5678/IncomingWebhook/abcTeams99",
        "abcTeams99",
    ),
    (
        "Google Chat webhook",
        "https://chat.googleapis.com/v1/spaces/AAAACorpus/messages?key=ChatKey123&token=ChatTok45",
        "ChatTok45",
    ),
    ("AWS access key id", "aws key AKIAZXCVBNMASDFGHJKL in env", "AKIAZXCVBNMASDFGHJKL"),
    (
        "AWS secret access key",
        'aws_secret_access_key = "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"',
        "wJalrXUtnFEMI/K7MDENG",
    ),
    (
        "Google API key",
        "maps key AIzaSyCorpus0123456789abcdefghijklmnopq",
        "AIzaSyCorpus0123456789",
    ),
    ("Google OAuth token", "ya29.a0AfH6SMCorpusAccessToken0123456789", "a0AfH6SMCorpusAccess"),
    ("Azure storage key", "AccountKey=" + "Zm9v" * 21 + "YmE=;EndpointSuffix=core", "Zm9vZm9vZm9v"),
    (
        "Azure AD client secret",
        "secret abc8Q~CorpusAzureClientSecret0123456789ab",
        "CorpusAzureClient",
    ),
    (
        "Azure SAS signature",
        "blob?sv=2022-11-02&sig=CorpusSasSig0123456789%2Babcd%3D",
        "CorpusSasSig",
    ),
    (
        "GitHub classic token",
        "push ghp_" + "CorpusGithub0123456789abcdefABCDEF12" + " no",
        "CorpusGithub0",
    ),
    (
        "GitHub fine-grained",
        "github_pat_11CORPUS0123456789_abcdefghijklmnopqrstuvwxyz",
        "11CORPUS0123",
    ),
    ("GitLab token", "glpat-CorpusGitlab0123456789ab", "CorpusGitlab0123"),
    ("Bitbucket app password", "ATBBCorpusBitbucket0123456789abcdef", "CorpusBitbucket0123"),
    ("OpenAI project key", "called with sk-proj-SECRETsk0123456789abcdefXYZ", "SECRETsk0123456789"),
    ("Anthropic key", "anthropic sk-ant-api03-SecretAnt0123456789abcd", "SecretAnt0123456789"),
    ("Hugging Face token", "hf_CorpusHuggingFace0123456789abcdefgh", "CorpusHuggingFace0123"),
    ("Groq key", "gsk_" + "CorpusGroq0123456789" * 3, "CorpusGroq0123456789"),
    ("xAI key", "xai-" + "CorpusXai01234567890" * 3, "CorpusXai01234567890"),
    ("traceviz ingest token", "token tvz_Q2xrCorpusIngestToken-0123456789abcd", "Q2xrCorpusIngest"),
    ("JWT", f"jwt {JWT}", "Zq3jwtCorpusSignatureOnly"),
    ("card number, spaced", "card 4111 1111 1111 1111 declined", "4111 1111 1111 1111"),
    ("card number, plain", "pan=5555555555554444 rejected", "5555555555554444"),
    ("card number, dashed Amex", "amex 3782-822463-10005", "3782-822463-10005"),
    ("base64 basic credentials", "creds dXNlcjpzM2NyM3RQYXNz sent", "dXNlcjpzM2NyM3RQYXNz"),
    ("password pair", "login password=hunter2&user=bob", "hunter2"),
    ("SendGrid key", "SG." + "CorpusSendgrid01234567" + "." + "C" * 43, "CorpusSendgrid01234567"),
    ("Twilio key", "twilio SK" + "0123456789abcdef" * 2, "0123456789abcdef0123"),
    (
        "npm token",
        "//registry.npmjs.org/:_authToken=npm_CorpusNpm0123456789abcdef",
        "CorpusNpm0123",
    ),
    ("PyPI token", "pypi-AgEIcHlwaS5vcmc" + "CorpusPypi01" * 7, "CorpusPypi01CorpusPypi01"),
    (
        "Telegram bot token",
        "bot 123456789:AAHCorpusTelegramToken0123456789abcd",
        "AAHCorpusTelegram",
    ),
    ("Slack bot token", "slack xoxb-1234567890-SecretSlackTok", "SecretSlackTok"),
    # Issue 34: formats that reached the database before.
    ("npm access token", "npm " + "npm_" + "CorpusNpmAccess0123456789abcdefghijkl", "CorpusNpmAcc"),
    ("Shopify access token", "shop " + "shpat_" + "c0ffee" * 5 + "ab", "c0ffeec0ffee"),
    ("Shopify shared secret", "shpss_" + "0123456789abcdef" * 2 + " used", "0123456789abcdef01"),
    (
        "Vault service token",
        "VAULT_TOKEN " + "hvs." + "CorpusVaultService0123456789",
        "CorpusVault",
    ),
    ("Vault batch token", "hvb." + "AAAAAQCorpusVaultBatch0123456789abc", "CorpusVaultBatch"),
    ("DigitalOcean token", "do " + "dop_v1_" + "ab12" * 16, "ab12ab12ab12ab12"),
    ("DigitalOcean OAuth", "doo_v1_" + "cd34" * 16, "cd34cd34cd34cd34"),
    (
        "Sentry org token",
        "sntrys_" + "eyJpYXQiOjE3MDAwMDAwMDAsCorpusSentryOrg0123456789",
        "CorpusSentryOrg",
    ),
    ("Sentry user token", "auth " + "sntryu_" + "5e" * 32, "5e5e5e5e5e5e5e5e"),
    ("Doppler token", "dp.pt." + "CorpusDopplerPersonal0123456789abcdefghijkl", "CorpusDoppler"),
    (
        "Linear API key",
        "linear " + "lin_api_" + "CorpusLinear0123456789abcdefghijklmnopqr",
        "CorpusLinear0",
    ),
    (
        "HubSpot private app token",
        "pat-na1-" + "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        "1a2b3c4d-5e6f",
    ),
    (
        "Postman API key",
        "PMAK-" + "0123456789abcdef01234567-" + "0123456789abcdef0123456789abcdef01",
        "0123456789abcdef01234567-",
    ),
    ("Databricks token", "dapi" + "0123456789abcdef" * 2, "dapi0123456789abcdef"),
    (
        "Grafana service account",
        "glsa_" + "CorpusGrafana0123456789abcdefghi" + "_0a1b2c3d",
        "CorpusGrafana0",
    ),
    (
        "Grafana cloud token",
        "glc_" + "eyJvIjoiQ29ycHVzIiwibiI6ImdyYWZhbmEifQ==",
        "eyJvIjoiQ29ycHVz",
    ),
    ("Pulumi token", "pul-" + "0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123"),
    (
        "Terraform Cloud token",
        "CorpusTfc01234" + ".atlasv1." + "CorpusTerraform" * 5,
        "CorpusTerraformCorpus",
    ),
    ("New Relic key", "NRAK-" + "CORPUSNEWRELIC0123456789ABC", "CORPUSNEWRELIC0123"),
    (
        "Notion token",
        "ntn_" + "12345678901" + "CorpusNotion0123456789abcdefghijklmno",
        "CorpusNotion0123",
    ),
    ("Figma token", "figd_" + "CorpusFigma0123456789abcdefghijklmnopqrstu", "CorpusFigma0123"),
    (
        "PlanetScale token",
        "pscale_tkn_" + "CorpusPlanetScale0123456789abcdefgh",
        "CorpusPlanetScale",
    ),
    (
        "Supabase token",
        "sbp_" + "0123456789abcdef0123456789abcdef01234567",
        "0123456789abcdef01234",
    ),
    (
        "Heroku token",
        "HRKU-" + "AACorpusHeroku0123456789abcdefghijklmnopqrstuvwx",
        "CorpusHeroku0123",
    ),
    ("Docker Hub token", "dckr_pat_" + "CorpusDockerHub0123456789ab", "CorpusDockerHub"),
    ("LangSmith key", "lsv2_pt_" + "0123456789abcdef" * 2 + "_0123456789", "0123456789abcdef0123"),
    (
        "Age secret key",
        "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" + "QPZRY9X8GF2TVDW0S3JN54KHCE6M",
        "QPZRY9X8GF2TVDW0S3JN",
    ),
    ("Alibaba access key id", "alibaba " + "LTAI" + "CorpusAlibaba0123456", "CorpusAlibaba0123"),
    ("RubyGems key", "rubygems_" + "0123456789abcdef" * 3, "0123456789abcdef0123"),
    (
        "Airtable token",
        "pat" + "CorpusAirtable" + ".0123456789abcdef" + "0123456789abcdef" * 3,
        "0123456789abcdef0123",
    ),
    (
        "Pinecone key",
        "pcsk_" + "CorpusPinecone_0123456789abcdefghijklmnopqrstuvwxyz",
        "CorpusPinecone_",
    ),
    (
        "Dynatrace token",
        "dt0c01." + "CORPUSDYNATRACE012345678" + "." + "CORPUSDYNATRACESECRET0123456789" * 2 + "AB",
        "CORPUSDYNATRACESECRET",
    ),
    (
        "Sendinblue key",
        "xkeysib-" + "0123456789abcdef" * 4 + "-CorpusBrevo01234",
        "0123456789abcdef0123",
    ),
    # Context forms: the secret is known by what stands before it.
    ("mysql -p", "mysql -u root -pS3cretMysql9 -h db app", "S3cretMysql9"),
    ("mysqldump --password", "mysqldump --password=DumpPw42x app > out.sql", "DumpPw42x"),
    ("--password flag", "deploy.sh --user bob --password Flag9Secret --verbose", "Flag9Secret"),
    ("--token flag", "cli login --token CliTok3nValue", "CliTok3nValue"),
    ("--api-key flag", "run --api-key=KeyFlag8value", "KeyFlag8value"),
    ("curl -u", "curl -u bob:CurlPass77 https://api.example.com/x", "CurlPass77"),
    ("curl --user", "curl --user alice:CurlUser88 https://api.example.com", "CurlUser88"),
    (
        "XML password element",
        "<config><user>bob</user><password>XmlPw6secret</password></config>",
        "XmlPw6secret",
    ),
    ("XML secret element", "<clientSecret>XmlClient5Sec</clientSecret>", "XmlClient5Sec"),
    (
        "URL ?key=",
        "GET https://maps.example.com/api/geocode?key=QueryKey4Value&q=x",
        "QueryKey4Value",
    ),
    (
        "URL &signature=",
        "https://cdn.example.com/a.png?expires=1&signature=SigQuery3Value",
        "SigQuery3Value",
    ),
    (
        "URL X-Amz-Signature",
        "https://b.s3.amazonaws.com/o?X-Amz-Date=2&X-Amz-Signature=AmzSig2Value9",
        "AmzSig2Value9",
    ),
    ("openssl pass:", "openssl rsa -in k.pem -passin pass:OpensslPw1x -out k2.pem", "OpensslPw1x"),
    ("sshpass -p", "sshpass -p SshPass0word ssh bob@host", "SshPass0word"),
    ("redis-cli -a", "redis-cli -h cache -a RedisAuth5x ping", "RedisAuth5x"),
    ("sqlcmd -P", "sqlcmd -S db -U sa -P SqlCmdPw7x -Q select", "SqlCmdPw7x"),
    ("netrc password", "machine api.example.com login bob password NetrcPw8x", "NetrcPw8x"),
    # Encoded forms: a token in base64, hex or URL encoding.
    (
        "base64 of a token",
        "cfg Z2hwX0NvcnB1c0dpdGh1YjAxMjM0NTY3ODlhYmNkZWZBQkNERUYxMg== end",
        "Z2hwX0NvcnB1c0dpdGh1YjAx",
    ),
    (
        "hex of a token",
        "blob 6768705f436f72707573476974687562303132333435363738396162636465664142434445463132 end",
        "6768705f436f727075734769746875623031",
    ),
    (
        "URL-encoded token",
        "next=%2Fcb%3Ftoken%3Dsk-proj-UrlEncSecret0123456789ab",
        "UrlEncSecret0123",
    ),
    (
        "URL-encoded header",
        "h=Authorization%3A%20Bearer%20UrlEncBearer0123456789",
        "UrlEncBearer0123",
    ),
]

# Values under keys named like a secret: masked whatever they look like.
SECRET_OBJECT = {
    "auth": "plainAuthValue11",
    "credentials": {"user": "bob", "pw": "plainCredsValue12"},
    "refresh_token": "plainRefreshValue13",
    "refresh_tokens": ["plainRefreshList14"],
    "ssh_key": "plainSshKeyValue15",
    "private_key": "plainPrivateValue16",
    "cookie": "plainCookieValue17",
    "session": "plainSessionValue18",
    "basic_auth": "plainBasicAuth19",
    "headers": [["Authorization", "plainHeaderList20"], ["Set-Cookie", "plainSetCookie21"]],
    "har": [{"name": "Cookie", "value": "plainHarCookie22"}],
    "password": "plainPasswordValue1",
    "nested": {"db": {"PASSWD": "plainNestedPasswd5"}, "list": [{"access_key": "plainAccess9"}]},
    "session_id": "sess-kept-visible",  # an identifier, not a secret: kept
}
SECRET_OBJECT_VALUES = [
    "plainAuthValue11",
    "plainCredsValue12",
    "plainRefreshValue13",
    "plainRefreshList14",
    "plainSshKeyValue15",
    "plainPrivateValue16",
    "plainCookieValue17",
    "plainSessionValue18",
    "plainBasicAuth19",
    "plainHeaderList20",
    "plainSetCookie21",
    "plainHarCookie22",
    "plainPasswordValue1",
    "plainNestedPasswd5",
    "plainAccess9",
]

# Ordinary texts that look a little like secrets: they must come back unchanged.
ORDINARY_TEXTS: list[str] = [
    "3f786850e387550fdab836ed7e6dc881de23001b",  # git sha
    "3f78685",  # short git sha
    "d41d8cd98f00b204e9800998ecf8427e",  # md5
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "sha256:0d3f1c3a9b2e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",  # traceviz default event id
    "7c9e6679-7425-40de-944b-e07fc1f90ae7",  # uuid
    "01ARZ3NDEKTSV4RRFFQ69G5FAV",  # ULID
    "5b8d0fd3a4c1e2f30a1b2c3d4e5f6a7b",  # trace id
    "a1b2c3d4e5f60718",  # span id
    "job-2024-01-15-001",
    "run_8f14e45fceea167a5a36dedd4bea2543",
    "worker-7d9f8b6c5-x2x4z",
    "gpt-4o-2024-08-06",
    "claude-3-5-sonnet-20241022",
    "1700000000000",  # epoch milliseconds
    "1732312345678901234",  # epoch nanoseconds
    "4111111111111112",  # card-shaped, fails the Luhn check
    "9780306406157",  # ISBN
    "2024-01-15T10:00:00+00:00",
    "2026-11-23T04:06:52.444166Z",  # an OTLP span's end, as the mapping writes it
    "otlp:5b8d0fd3a4c1e2f30a1b2c3d4e5f6a7b:a1b2c3d4e5f60718",  # an OTLP span's event id
    "+1-555-0100",
    "https://example.com:8443/path@v2",
    "http://localhost:8000/api/v1/events",
    "git@github.com:org/repo.git",
    "bob@example.com",
    "ZXhhbXBsZQ==",  # base64 of a word, not of user:password
    "token expired",
    "Gmail.send: token expired",
    "session_id=sess-123 not found",
    "max_tokens=4096 exceeded",
    "prompt_tokens: 1200",
    "basic information about the user",
    "the bearer of bad news",
    "authorization failed for user bob",
    "see https://example.com/docs/errors#auth",
    "Expecting ',' delimiter: line 1 column 57",
    '{"step": "fetch", "attempt": 2, "ok": false}',
    "[1, 2, 3]",
    "graph.next_step.parse_invalid",
    "APACHEKAFKA1 topic lag",
    "fe80::1ff:fe23:4567:890a",
    "mysql -u root -h db app",  # no password given
    "pip install --no-password-prompt pkg",
    "deploy --password-file /run/secrets/db",
    "curl -u $USER https://api.example.com",
    "<password/> left empty",
    "https://example.com/search?q=key&page=2",
    "https://example.com/api?keyword=signature",
    "https://example.com/a%20b/c%3Fd",
    "6d61782d746f6b656e73",  # hex of "max-tokens"
    "aGVsbG8gd29ybGQgdGhpcyBpcyBwbGFpbiB0ZXh0",  # base64 of plain words
]
# Card numbers sent as JSON numbers: masked; ordinary numbers (ids, epochs, amounts) kept.
CARD_NUMBERS = [4111111111111111, 5555555555554444, 378282246310005, 6011111111111117]
ORDINARY_NUMBERS = [4111111111111112, 1700000000000, 1732312345678901234, 9780306406157, 42]
