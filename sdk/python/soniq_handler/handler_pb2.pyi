from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SidecarMessage(_message.Message):
    __slots__ = ("job", "cancel", "ping", "shutdown", "ack", "jobs", "enqueued", "features")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    job: Job
    cancel: CancelRequest
    ping: Ping
    shutdown: Shutdown
    ack: Ack
    jobs: Jobs
    enqueued: Enqueued
    features: Features
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., cancel: _Optional[_Union[CancelRequest, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., shutdown: _Optional[_Union[Shutdown, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., jobs: _Optional[_Union[Jobs, _Mapping]] = ..., enqueued: _Optional[_Union[Enqueued, _Mapping]] = ..., features: _Optional[_Union[Features, _Mapping]] = ...) -> None: ...

class HandlerMessage(_message.Message):
    __slots__ = ("hello", "result", "pong", "draining", "results", "enqueue")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    result: Result
    pong: Pong
    draining: Draining
    results: Results
    enqueue: Enqueue
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., draining: _Optional[_Union[Draining, _Mapping]] = ..., results: _Optional[_Union[Results, _Mapping]] = ..., enqueue: _Optional[_Union[Enqueue, _Mapping]] = ...) -> None: ...

class Jobs(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class Results(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[Result]
    def __init__(self, results: _Optional[_Iterable[_Union[Result, _Mapping]]] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Pong(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Shutdown(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Ack(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Draining(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RunningJob(_message.Message):
    __slots__ = ("id", "name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol", "sdk", "pid", "jobs", "concurrency", "sync_concurrency", "running", "kept", "acks", "batches", "features")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SDK_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    SYNC_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    protocol: int
    sdk: str
    pid: int
    jobs: _containers.RepeatedCompositeFieldContainer[HelloJob]
    concurrency: int
    sync_concurrency: int
    running: _containers.RepeatedCompositeFieldContainer[RunningJob]
    kept: _containers.RepeatedScalarFieldContainer[str]
    acks: bool
    batches: bool
    features: bool
    def __init__(self, protocol: _Optional[int] = ..., sdk: _Optional[str] = ..., pid: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[HelloJob, _Mapping]]] = ..., concurrency: _Optional[int] = ..., sync_concurrency: _Optional[int] = ..., running: _Optional[_Iterable[_Union[RunningJob, _Mapping]]] = ..., kept: _Optional[_Iterable[str]] = ..., acks: _Optional[bool] = ..., batches: _Optional[bool] = ..., features: _Optional[bool] = ...) -> None: ...

class HelloJob(_message.Message):
    __slots__ = ("name", "cancellable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CANCELLABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    cancellable: bool
    def __init__(self, name: _Optional[str] = ..., cancellable: _Optional[bool] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "name", "args_json", "attempt", "max_attempts", "queue", "deadline_ms", "traceparent", "worker_id", "scheduled_at_ms", "created_at_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    args_json: str
    attempt: int
    max_attempts: int
    queue: str
    deadline_ms: int
    traceparent: str
    worker_id: str
    scheduled_at_ms: int
    created_at_ms: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., args_json: _Optional[str] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., queue: _Optional[str] = ..., deadline_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., worker_id: _Optional[str] = ..., scheduled_at_ms: _Optional[int] = ..., created_at_ms: _Optional[int] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("id", "status", "result_json", "error", "seconds", "reason")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[Result.Status]
        DONE: _ClassVar[Result.Status]
        FAILED: _ClassVar[Result.Status]
        SNOOZE: _ClassVar[Result.Status]
        CANCELLED: _ClassVar[Result.Status]
    STATUS_UNSPECIFIED: Result.Status
    DONE: Result.Status
    FAILED: Result.Status
    SNOOZE: Result.Status
    CANCELLED: Result.Status
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: Result.Status
    result_json: str
    error: ResultError
    seconds: float
    reason: str
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[Result.Status, str]] = ..., result_json: _Optional[str] = ..., error: _Optional[_Union[ResultError, _Mapping]] = ..., seconds: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class ResultError(_message.Message):
    __slots__ = ("type", "message", "traceback", "retryable", "reason")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    traceback: str
    retryable: bool
    reason: str
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., retryable: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Enqueue(_message.Message):
    __slots__ = ("parent", "id", "name", "args_json", "queue", "priority", "max_attempts", "delay_seconds", "dedup_key", "unique", "immediate")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DEDUP_KEY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    IMMEDIATE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    id: str
    name: str
    args_json: str
    queue: str
    priority: int
    max_attempts: int
    delay_seconds: float
    dedup_key: str
    unique: bool
    immediate: bool
    def __init__(self, parent: _Optional[str] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., args_json: _Optional[str] = ..., queue: _Optional[str] = ..., priority: _Optional[int] = ..., max_attempts: _Optional[int] = ..., delay_seconds: _Optional[float] = ..., dedup_key: _Optional[str] = ..., unique: _Optional[bool] = ..., immediate: _Optional[bool] = ...) -> None: ...

class Enqueued(_message.Message):
    __slots__ = ("id", "job_id", "error_code", "error_message")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    error_code: str
    error_message: str
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class Features(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...
