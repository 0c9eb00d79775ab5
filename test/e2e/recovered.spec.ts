/**
 * A window whose page process was gone is loaded again by Electron (window.ts) with RECOVERED_FRAGMENT: the page
 * says so in the notice that stays, once (the fragment is dropped, so a reload says nothing).
 */
import { RECOVERED_FRAGMENT } from '../../src/shared/api';
import { expect, test } from './fixtures';

test('a page loaded again after its process was gone says so once, until dismissed', async ({ page, server }) => {
  await page.goto(server.url + RECOVERED_FRAGMENT);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  const notice = page.getByTestId('sticky-notice');
  await expect(notice).toContainText("kvdesk's window stopped unexpectedly and was loaded again");
  expect(new URL(page.url()).hash).toBe('');
  await notice.getByRole('button', { name: 'Dismiss the notice that stays' }).click();
  await expect(notice).toBeHidden();
  await page.reload();
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(page.getByTestId('sticky-notice')).toBeHidden();
});

test('a page opened plainly says nothing of it', async ({ page, server }) => {
  await page.goto(server.url);
  await expect(page.getByTestId('thread-list')).toHaveAttribute('data-loaded', 'true');
  await expect(page.getByTestId('sticky-notice')).toBeHidden();
});
