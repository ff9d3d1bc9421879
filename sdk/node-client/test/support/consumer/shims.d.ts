// What the README example needs of pg and Node, without their type packages.
declare module 'pg' {
  class Pool {
    constructor(config: { connectionString?: string });
    query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  }
  const pg: { Pool: typeof Pool };
  export default pg;
}
declare const process: { env: Record<string, string | undefined> };
declare const console: { log(...args: unknown[]): void };
